"""tests/hygiene.py, the plugin every session loads: run on a small suite of its own in a pytest subprocess, whose
checkout is a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tools.kits import checkout_changes, leftover_processes

REPO_ROOT = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import sys
sys.path[:0] = [{str(REPO_ROOT)!r}, {str(REPO_ROOT / "tests")!r}]
import tools
import pytest, subprocess

pytest_plugins = ["hygiene"]


@pytest.fixture(scope="session")
def kept_server():
    # Started before the tests that use it and stopped at the session's end: never a leftover.
    server = subprocess.Popen(["sleep", "600"])
    yield server
    server.kill()
    server.wait()


@pytest.fixture(scope="session")
def forgotten_server():
    return subprocess.Popen(["sleep", "601"])
"""

SUITE = """
import pathlib, subprocess


def test_reaps_its_child():
    subprocess.run(["sleep", "0"], check=True)


def test_starts_the_interpreters_resource_tracker():
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # it lives as long as pytest does, as it would in any program


def test_uses_the_kept_server(kept_server):
    assert kept_server.poll() is None


def test_leaves_a_child_and_an_orphan(tmp_path):
    child = subprocess.Popen(["sleep", "602"])
    # The shell exits at once, so its sleeping child is re-parented away from pytest.
    orphan = subprocess.run(["sh", "-c", "sleep 603 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    pathlib.Path(__file__).parent.joinpath("out", "pids.txt").write_text(f"{child.pid} {orphan.stdout.strip()}")


def test_uses_the_forgotten_server(forgotten_server):
    pathlib.Path(__file__).parent.joinpath("out", "server.txt").write_text(str(forgotten_server.pid))


def test_writes_into_the_checkout():
    pathlib.Path(__file__).with_name("written.txt").write_text("x")
"""


def _alive(pid: int) -> bool:
    facts = leftover_processes.read_process(pid)
    return facts is not None and facts.alive


@pytest.mark.slow
def test_the_plugin_names_and_kills_leftovers_and_names_writes_into_the_checkout(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "out").mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_suite.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        # A sleeping leftover never exits on its own, so the grace before killing it would only cost time.
        # The inner run's output is what is read, so none of the outer run's options (CI's --durations) reach it.
        env={**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "UNSLOTH_TEST_LEFTOVER_GRACE_S": "0.2"},
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    child, orphan = (int(pid) for pid in (tmp_path / "out" / "pids.txt").read_text().split())
    server = int((tmp_path / "out" / "server.txt").read_text())
    # The test that left them is named, with each process; both were killed at its teardown.
    assert "ERROR at teardown of test_leaves_a_child_and_an_orphan" in output, output
    assert f"pid {child} (started by test_suite.py::test_leaves_a_child_and_an_orphan): sleep 602" in output, output
    assert f"pid {orphan} (started by test_suite.py::test_leaves_a_child_and_an_orphan): sleep 603" in output, output
    # A session fixture's process is the session's to stop: named at its end, started outside any one test.
    assert "1 process(es) of this session were still running at its end, now killed" in output, output
    assert f"pid {server} (started by {OUTSIDE}): sleep 601" in output, output
    assert "this test wrote ['written.txt'] into" in output, output
    assert "added out/pids.txt" in output and "added out/server.txt" in output and "added written.txt" in output, output
    assert "sleep 600" not in output and "resource_tracker" not in output, output
    # Their calls passed; the two tests' teardowns erred, and the session failed.
    assert "6 passed, 2 errors" in output, output
    assert not any(_alive(pid) for pid in (child, orphan, server))


OUTSIDE = "a fixture or hook outside any one test (module or session scope, collection)"


def test_proc_stat_is_split_after_the_command_whatever_it_holds():
    assert leftover_processes.parse_stat(b"4242 (python) x (y)) S 17 4242 4242 0 -1") == ("S", 17)
    assert leftover_processes.parse_stat(b"7 (sleep) Z 1 7 7 0") == ("Z", 1)


def test_proc_environ_and_cmdline_are_parsed():
    environ = leftover_processes.parse_environ(b"A=1\0B=x=y\0\0NOEQUALS\0")
    assert environ == {"A": "1", "B": "x=y"}
    assert leftover_processes.parse_cmdline(b"sleep\x00600\x00") == "sleep 600"


def test_a_helper_read_mid_exec_is_waited_for_not_named(tmp_path, monkeypatch):
    """CI once read the resource tracker between fork and exec: an empty command line and environment, so it was
    named as an unmarked leftover. A fake /proc (the OS's answers) fills its command line a moment later."""
    proc, root, helper = tmp_path / "proc", 500, 501
    for pid, ppid in (("self", 1), (root, 1), (helper, root)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_bytes(f"{pid} (python) S {ppid} 1 1 0 -1".encode())
        (proc / str(pid) / "environ").write_bytes(b"")
        (proc / str(pid) / "cmdline").write_bytes(b"")
    monkeypatch.setattr(leftover_processes, "PROC", proc)
    command = b"python\0-c\0from multiprocessing.resource_tracker import main;main(5)\0"
    exec_ends = threading.Timer(0.2, (proc / str(helper) / "cmdline").write_bytes, (command,))
    exec_ends.start()
    try:
        assert leftover_processes.find_leftovers("token", [helper], root=root) == []
    finally:
        exec_ends.join()


def test_checkout_changes_name_a_new_folder_once_and_a_rewritten_file():
    before = {"docs": (0, -1), "docs/a.md": (1, 10), "tools": (0, -1), "old.txt": (1, 1)}
    after = {
        "docs": (0, -1),
        "docs/a.md": (2, 10),
        "tools": (0, -1),
        "build": (0, -1),
        "build/tokenizers": (0, -1),
        "build/tokenizers/bpe.json": (3, 5),
        "tools/new.py": (4, 1),
    }
    assert checkout_changes.changes(before, after) == [
        "added build",
        "added tools/new.py",
        "removed old.txt",
        "rewrote docs/a.md",
    ]
    assert checkout_changes.changes(before, dict(before)) == []


def test_the_tools_own_files_are_left_out_of_the_checkout_snapshot(tmp_path):
    for name in (".pytest_cache/v", "pkg/__pycache__/m.pyc", ".nox/tests/x", "zoo/z.egg-info/PKG-INFO", "pkg/m.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert sorted(checkout_changes.snapshot(tmp_path)) == ["pkg", "pkg/m.py", "zoo"]
    assert checkout_changes.top_level(tmp_path) == {"pkg", "zoo"}


def test_hypothesis_keeps_its_cache_outside_the_checkout():
    # Hypothesis writes ./.hypothesis/constants even with database=None, unless told where to.
    home = Path(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
    assert home.is_dir() and not home.is_relative_to(REPO_ROOT)
