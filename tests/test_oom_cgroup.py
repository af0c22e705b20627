"""The OOM-experiment helper: pure parsers everywhere, and a real limited cgroup where this host allows one."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import oom_cgroup
from tools.oom_cgroup import (
    JOIN_FAILED_EXIT,
    Mount,
    can_create_memory_cgroup,
    cgroup_directory,
    join_argv,
    memory_limited_cgroup,
    parse_flat_keyed,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_size,
)

MIB = 1 << 20
CAN_CREATE, WHY_NOT = can_create_memory_cgroup()
needs_cgroup = pytest.mark.skipif(not CAN_CREATE, reason=f"no limited memory cgroup on this host: {WHY_NOT}")


def _allocate(mib: int) -> list[str]:
    # Filling with 0xff touches every page, so the whole block is charged to the cgroup (calloc'd zeros might not be).
    return [sys.executable, "-c", f"block = b'\\xff' * ({mib} << 20); print(len(block))"]


# ---- pure parts -----------------------------------------------------------------------------------


def test_parse_mountinfo_keeps_cgroup_mounts_and_unescapes() -> None:
    text = (
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 /outer /sys/fs/cgroup/mem\\040ory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    assert parse_mountinfo(text) == [
        Mount(Path("/sys/fs/cgroup/mem ory"), "/outer", "cgroup", frozenset({"rw", "memory"})),
        Mount(Path("/sys/fs/cgroup/unified"), "/", "cgroup2", frozenset({"rw", "nsdelegate"})),
    ]


def test_parse_proc_cgroup_splits_joined_controllers() -> None:
    text = "4:memory:/process_api/abc\n2:cpu,cpuacct:/\n1:name=systemd:/user\n0::/init.scope\n"
    assert parse_proc_cgroup(text) == {
        "memory": "/process_api/abc",
        "cpu": "/",
        "cpuacct": "/",
        "name=systemd": "/user",
        "": "/init.scope",
    }


def test_cgroup_directory_strips_the_mount_root() -> None:
    at_top = Mount(Path("/sys/fs/cgroup/memory"), "/", "cgroup", frozenset({"memory"}))
    nested = Mount(Path("/mnt/mem"), "/outer", "cgroup", frozenset({"memory"}))
    assert cgroup_directory(at_top, "/process_api/abc") == Path("/sys/fs/cgroup/memory/process_api/abc")
    assert cgroup_directory(nested, "/outer/job") == Path("/mnt/mem/job")
    assert cgroup_directory(nested, "/outer") == Path("/mnt/mem")
    assert cgroup_directory(nested, "/outerior/job") is None


def test_parse_flat_keyed_reads_both_counter_files() -> None:
    assert parse_flat_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")["oom_kill"] == 3
    assert parse_flat_keyed("low 0\nhigh 2\nmax 9\noom 4\noom_kill 4\noom_group_kill 0\n")["max"] == 9


def test_parse_size_units() -> None:
    assert parse_size("512M") == 512 * 1024 * 1024
    assert parse_size("1G") == 1024**3
    assert parse_size("64MiB") == 64 * 1024 * 1024
    assert parse_size("4096") == 4096


def test_join_argv_writes_its_own_pid_then_execs(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    done = subprocess.run(
        join_argv(procs, [sys.executable, "-c", "import os; print(os.getpid())"]),
        capture_output=True,
        text=True,
        check=True,
    )
    # The same pid in the file and in the command shows the shell exec'd the command rather than forking it.
    assert procs.read_text().strip() == done.stdout.strip()


def test_join_argv_refuses_to_run_unlimited_when_joining_fails(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cgroup" / "cgroup.procs"
    done = subprocess.run(join_argv(missing, [sys.executable, "-c", "print('ran')"]), capture_output=True, text=True)
    assert done.returncode == JOIN_FAILED_EXIT
    assert "ran" not in done.stdout


# ---- a real cgroup ------------------------------------------------------------------------------


@needs_cgroup
def test_creates_limited_child_and_removes_it() -> None:
    own_before = Path("/proc/self/cgroup").read_text()
    with memory_limited_cgroup(96 * MIB) as handle:
        path = handle.path
        assert path.is_dir() and path.parent == handle.layout.parent
        assert int((path / handle.layout.limit_file).read_text()) == 96 * MIB
        assert handle.pids() == [] and handle.oom_kills() == 0
        inside = handle.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True)
        assert path.name in inside.stdout
    assert not path.exists()
    assert Path("/proc/self/cgroup").read_text() == own_before


@needs_cgroup
def test_removes_the_child_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="body failed"), memory_limited_cgroup(96 * MIB) as handle:
        path = handle.path
        raise RuntimeError("body failed")
    assert not path.exists()


@needs_cgroup
@pytest.mark.slow
def test_moves_a_still_running_process_out_before_removing() -> None:
    with memory_limited_cgroup(96 * MIB) as handle:
        path = handle.path
        sleeper = handle.popen([sys.executable, "-c", "import time; time.sleep(60)"])
        deadline = time.monotonic() + 10
        while sleeper.pid not in handle.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert handle.pids() == [sleeper.pid]
    try:
        assert not path.exists()
        assert path.name not in Path(f"/proc/{sleeper.pid}/cgroup").read_text()
    finally:
        sleeper.kill()
        sleeper.wait()


@needs_cgroup
@pytest.mark.slow
def test_a_process_past_the_limit_is_oom_killed_and_counted() -> None:
    with memory_limited_cgroup(64 * MIB) as handle:
        survivor = handle.run(_allocate(16), capture_output=True, text=True)
        assert (survivor.returncode, handle.oom_kills()) == (0, 0)
        started = time.monotonic()
        victim = handle.run(_allocate(256), capture_output=True, text=True, timeout=60)
        assert victim.returncode == -9, victim.stderr
        assert handle.oom_kills() >= 1
        assert time.monotonic() - started < 30
        peak = handle.peak_bytes()
        assert peak is None or 16 * MIB < peak <= 64 * MIB


@needs_cgroup
def test_cli_check_agrees_with_the_probe(capsys: pytest.CaptureFixture[str]) -> None:
    assert oom_cgroup.main(["check"]) == 0
    assert capsys.readouterr().out.startswith("yes: ")
