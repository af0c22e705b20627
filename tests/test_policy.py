"""The worker-count policy, black-box: only the operating system's answers are faked.

Numbers in comments are the hand arithmetic behind each expected value.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tools.kits.fake_host import CgroupSpec, HostProfile, apply_host
from unsloth_zoo import dataset_num_proc as policy

LOGGER = "unsloth_zoo.dataset_num_proc"
GIB = 1024**3


@pytest.fixture
def host(monkeypatch, tmp_path):
    """Apply a simulated host: keyword arguments are HostProfile fields."""
    counter = itertools.count()

    def apply(**fields) -> HostProfile:
        profile = HostProfile(**fields)
        apply_host(monkeypatch, profile, tmp_path / f"host{next(counter)}", [policy])
        return profile

    return apply


def warnings_logged(caplog) -> list:
    return [
        record.getMessage() for record in caplog.records if record.name == LOGGER and record.levelno == logging.WARNING
    ]


# 1. The escape hatch -------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("4", 4), ("64", 64), (" 12 ", 12), ("007", 7)])
def test_hatch_integer_is_returned_verbatim_uncapped_and_unvetoed(host, value, expected):
    # A macOS, spawn-only host with half a gigabyte would otherwise never get workers.
    host(
        platform="darwin",
        start_method="spawn",
        cpu_count=1,
        available_memory_gb=0.5,
        env={policy.NUM_PROC_ENV_VAR: value},
    )
    assert policy.get_dataset_num_proc() == expected
    assert policy.get_dataset_num_proc(2, serial_as_none=False) == expected
    assert policy.environment_override() == (True, expected)


@pytest.mark.parametrize("value", ["", "0", "1", "none", "NULL", " False ", "null"])
def test_hatch_serial_words_mean_in_process(host, value):
    host(cpu_count=64, env={policy.NUM_PROC_ENV_VAR: value})
    assert policy.environment_override() == (True, None)
    assert policy.get_dataset_num_proc(16) is None
    # The config layer writes serial as 1 while forking works.
    assert policy.get_dataset_num_proc(16, serial_as_none=False) == 1


@pytest.mark.parametrize("value", ["banana", "-3", "4.0", "²"])
def test_hatch_garbage_warns_once_and_is_ignored(host, caplog, value):
    host(cpu_count=8, available_memory_gb=64, env={policy.NUM_PROC_ENV_VAR: value})
    assert policy.environment_override() == (False, None)
    assert policy.get_dataset_num_proc() == 4  # 8 CPUs // 2, as if unset
    assert policy.get_dataset_num_proc() == 4
    messages = [m for m in warnings_logged(caplog) if policy.NUM_PROC_ENV_VAR in m]
    assert len(messages) == 1 and repr(value) in messages[0]


def test_hatch_unset_is_not_a_decision(host):
    host()
    assert policy.environment_override() == (False, None)


# 2. Workers unusable: start method other than fork, and macOS ---------------------------------


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_non_fork_start_method_runs_in_process(host, method):
    host(start_method=method, cpu_count=16)
    assert policy.get_dataset_num_proc() is None
    assert policy.get_dataset_num_proc(8) is None
    assert policy.get_dataset_num_proc(8, serial_as_none=False) is None


def test_macos_runs_in_process_even_when_fork_is_reported(host):
    host(platform="darwin", start_method="fork", start_method_pinned=True, cpu_count=16)
    assert policy.get_dataset_num_proc(4) is None
    assert policy.explain_dataset_num_proc(4).decided_by == "platform"


def test_refused_explicit_request_warns_once_naming_reason_and_hatch(host, caplog):
    host(start_method="spawn", cpu_count=16)
    policy.get_dataset_num_proc(4)
    policy.get_dataset_num_proc(4)
    messages = warnings_logged(caplog)
    assert len(messages) == 1
    assert "'spawn'" in messages[0] and policy.NUM_PROC_ENV_VAR in messages[0]


def test_refused_auto_request_does_not_warn(host, caplog):
    host(start_method="spawn", cpu_count=16)
    assert policy.get_dataset_num_proc() is None
    assert warnings_logged(caplog) == []


# 3. Where the start method is read from ---------------------------------------------------------


def test_start_method_comes_from_multiprocess_not_stdlib(host):
    host(start_method="spawn", stdlib_start_method="fork", cpu_count=8)
    assert policy.multiprocessing_start_method() == "spawn"
    assert policy.get_dataset_num_proc() is None
    host(start_method="fork", stdlib_start_method="spawn", cpu_count=8)
    assert policy.multiprocessing_start_method() == "fork"
    assert policy.get_dataset_num_proc() == 4


def test_pinned_start_method_is_read(host):
    host(start_method="forkserver", start_method_pinned=True)
    assert policy.multiprocessing_start_method() == "forkserver"


def test_falls_back_to_stdlib_when_multiprocess_is_absent(host):
    host(start_method=None, stdlib_start_method="fork", cpu_count=8)
    assert policy.multiprocessing_start_method() == "fork"
    assert policy.explain_dataset_num_proc().host.start_method_source == "multiprocessing"
    assert policy.get_dataset_num_proc() == 4


def test_windows_never_reads_as_forkable_even_when_a_library_claims_fork(host, caplog):
    host(platform="win32", start_method="fork", start_method_pinned=True, stdlib_start_method="fork", cpu_count=32)
    assert policy.multiprocessing_start_method() is None
    assert policy.explain_dataset_num_proc().host.start_method_source == "unknown"
    assert policy.get_dataset_num_proc(8) is None
    assert any("does not offer" in message for message in warnings_logged(caplog))


def test_reading_the_start_method_does_not_pin_it():
    # A fresh interpreter: reading must leave a later set_start_method free to choose.
    code = (
        "import multiprocess\n"
        "from unsloth_zoo.dataset_num_proc import multiprocessing_start_method as read\n"
        "first = read()\n"
        "assert multiprocess.get_start_method(allow_none=True) is None, 'pinned by reading'\n"
        "default = multiprocess.get_start_method()\n"  # pins the default context, as a first Pool would
        "other = 'spawn' if first != 'spawn' else 'fork'\n"
        "multiprocess.set_start_method(other, force=True)\n"
        "print(first == default, read() == other)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


# 4. What counts as a request ---------------------------------------------------------------------


@pytest.mark.parametrize("desired", [0, 1, -5, np.int64(1), np.int32(0)])
def test_integer_at_most_one_means_serial(host, desired):
    host(cpu_count=64)
    assert policy.get_dataset_num_proc(desired) is None
    assert policy.get_dataset_num_proc(desired, serial_as_none=False) == 1


@pytest.mark.parametrize("desired, expected", [(np.int64(6), 6), (np.uint8(3), 3), (5, 5)])
def test_any_integral_is_a_request(host, desired, expected):
    host(cpu_count=2, available_memory_gb=64)
    value = policy.get_dataset_num_proc(desired)
    assert value == expected and type(value) is int


@pytest.mark.parametrize("desired", [None, True, False])
def test_none_and_bools_auto_size_silently(host, caplog, desired):
    host(cpu_count=8)
    assert policy.get_dataset_num_proc(desired) == 4
    assert warnings_logged(caplog) == []


@pytest.mark.parametrize("desired", [2.0, "4", 0.5])
def test_floats_and_strings_auto_size_with_one_warning(host, caplog, desired):
    host(cpu_count=8)
    assert policy.get_dataset_num_proc(desired) == 4
    assert policy.get_dataset_num_proc(desired) == 4
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and repr(desired) in messages[0]


# 5. The auto count -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cpus, expected",
    [(1, None), (2, 2), (3, 2), (4, 2), (8, 4), (15, 7), (16, 8), (64, 8), (192, 8), (None, None)],
)
def test_auto_is_half_the_cpus_at_least_two_capped(host, cpus, expected):
    host(cpu_count=cpus, available_memory_gb=512)
    assert policy.get_dataset_num_proc() == expected


# 6. Usable CPUs: logical count, affinity mask, cgroup quota ------------------------------------


def test_affinity_mask_bounds_cpus(host):
    host(cpu_count=64, affinity=6)
    decision = policy.explain_dataset_num_proc()
    assert decision.value == 3 and decision.host.usable_cpus == 6
    assert decision.host.cpu_source == "affinity mask"


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_cgroup_quota_bounds_cpus(host, version):
    host(cpu_count=64, affinity=64, cgroup=CgroupSpec(version=version, cpu_quota=6.5))
    decision = policy.explain_dataset_num_proc()
    assert decision.host.usable_cpus == 6 and decision.value == 3
    assert decision.host.cpu_source == "cgroup cpu quota"


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_unlimited_quota_does_not_bound(host, version):
    host(cpu_count=64, cgroup=CgroupSpec(version=version, cpu_quota=None))
    assert policy.get_dataset_num_proc() == 8


def test_quota_walk_takes_the_smallest_level(host, monkeypatch, tmp_path):
    host(cpu_count=64)
    root = tmp_path / "walk"
    leaf = root / "outer.slice" / "inner.scope"
    leaf.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "cpu.max").write_text("max 100000\n")
    (root / "outer.slice" / "cpu.max").write_text("300000 100000\n")
    (leaf / "cpu.max").write_text("1200000 100000\n")
    proc = tmp_path / "proc"
    proc.write_text("0::/outer.slice/inner.scope\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.explain_dataset_num_proc().host.usable_cpus == 3  # the 3-CPU ancestor wins over 12 at the leaf


# 7. Memory: host vs cgroup, working set, walk ----------------------------------------------------


def test_cgroup_memory_bounds_the_host_reading(host):
    # 6 GiB limit - 1 GiB used = 5 GiB; * 0.5 / 1 GiB = 2 workers.
    host(cpu_count=64, available_memory_gb=512, cgroup=CgroupSpec(memory_limit_gb=6, memory_usage_gb=1))
    decision = policy.explain_dataset_num_proc()
    assert decision.value == 2 and decision.host.memory_source == "cgroup free"
    assert decision.host.available_memory_bytes == 5 * GIB


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_reclaimable_page_cache_is_not_counted_as_used(host, version):
    # limit 8, usage 7.5 of which 6 inactive_file: working set 1.5, free 6.5 GiB -> 3 workers (not 0).
    host(cpu_count=64, cgroup=CgroupSpec(version=version, memory_limit_gb=8, memory_usage_gb=7.5, inactive_file_gb=6))
    assert policy.get_dataset_num_proc() == 3


def test_free_memory_never_goes_negative(host):
    host(cpu_count=64, cgroup=CgroupSpec(memory_limit_gb=1, memory_usage_gb=3))
    decision = policy.explain_dataset_num_proc()
    assert decision.host.available_memory_bytes == 0 and decision.value is None


def _v2_tree(root: Path, levels: dict, leaf: str) -> None:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("memory\n")
    for relative, files in levels.items():
        directory = root / relative
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)


def test_memory_high_and_each_levels_own_usage(host, monkeypatch, tmp_path):
    host(cpu_count=64, available_memory_gb=512)
    root = tmp_path / "cg"
    _v2_tree(
        root,
        {
            # outer: 20 GiB max, 16 GiB used -> 4 GiB free; inner: high 10 GiB, 1 GiB used -> 9 GiB free.
            "outer": {
                "memory.max": f"{20 * GIB}\n",
                "memory.current": f"{16 * GIB}\n",
                "memory.stat": "inactive_file 0\n",
            },
            "outer/inner": {
                "memory.max": "max\n",
                "memory.high": f"{10 * GIB}\n",
                "memory.current": f"{1 * GIB}\n",
                "memory.stat": "inactive_file 0\n",
            },
        },
        "outer/inner",
    )
    proc = tmp_path / "proc"
    proc.write_text("0::/outer/inner\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    decision = policy.explain_dataset_num_proc()
    assert decision.host.available_memory_bytes == 4 * GIB  # the outer level, with its own usage
    assert decision.value == 2


def test_hybrid_proc_self_cgroup_lines_in_any_order():
    text = "0::/user.slice\n12:memory:/job/7\n3:cpu,cpuacct:/job/7\nbroken line\n1:name=systemd:/x\n"
    v2, v1 = policy.parse_proc_self_cgroup(text)
    assert v2 == "/user.slice"
    assert v1["memory"] == ("memory", "/job/7")
    assert v1["cpu"] == ("cpu,cpuacct", "/job/7") and v1["cpuacct"] == ("cpu,cpuacct", "/job/7")
    reordered = "\n".join(reversed(text.splitlines()))
    assert policy.parse_proc_self_cgroup(reordered) == (v2, v1)


@pytest.mark.parametrize(
    "text, expected",
    [("max 100000", None), ("150000 100000", 1.5), ("200000", 2.0), ("50000 100000\n", 0.5)],
)
def test_parse_cpu_max(text, expected):
    assert policy.parse_cpu_max(text) == expected


@pytest.mark.parametrize("text", ["", "banana", "1 2 3", "-5 100000", "0 100000"])
def test_parse_cpu_max_rejects_garbage(text):
    with pytest.raises(ValueError):
        policy.parse_cpu_max(text)


def test_parse_memory_and_stat_values():
    assert policy.parse_memory_bytes("max\n") is None
    assert policy.parse_memory_bytes("9223372036854771712") is None
    assert policy.parse_memory_bytes("536870912\n") == 512 * 1024**2
    assert policy.parse_cfs_quota("-1", "100000") is None
    assert policy.parse_cfs_quota("250000", "100000") == 2.5
    assert policy.parse_stat_value("anon 5\ninactive_file 42\n", "inactive_file") == 42
    with pytest.raises(ValueError):
        policy.parse_stat_value("anon 5\n", "inactive_file")


# 8. What memory affords ------------------------------------------------------------------------


def test_fewer_than_two_affordable_runs_in_process_with_one_warning(host, caplog):
    host(cpu_count=64, available_memory_gb=3.5)  # 3.5 * 0.5 = 1.75 -> 1 worker
    assert policy.get_dataset_num_proc() is None
    assert policy.get_dataset_num_proc(8) is None
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and "in-process" in messages[0] and policy.NUM_PROC_ENV_VAR in messages[0]


def test_explicit_request_is_clamped_to_memory_with_a_warning_naming_the_hatch(host, caplog):
    host(cpu_count=64, available_memory_gb=20)  # 20 * 0.5 = 10 workers
    assert policy.get_dataset_num_proc(64) == 10
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and "10" in messages[0] and f"{policy.NUM_PROC_ENV_VAR}=64" in messages[0]


def test_auto_is_clamped_to_memory(host):
    host(cpu_count=64, available_memory_gb=6)  # 8 by CPUs, 3 by memory
    assert policy.get_dataset_num_proc() == 3


def test_unreadable_memory_keeps_the_request_and_keeps_auto_conservative(host):
    host(cpu_count=64, available_memory_gb=None)
    decision = policy.explain_dataset_num_proc()
    assert decision.value == policy.UNKNOWN_MEMORY_AUTO_CAP == 2
    assert "unreadable" in decision.steps[-1].reason
    assert policy.get_dataset_num_proc(16) == 16


def test_psutil_blocked_falls_back_to_proc_meminfo(host, monkeypatch, tmp_path):
    host(cpu_count=64)
    monkeypatch.delitem(sys.modules, "psutil")
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("psutil"), *sys.meta_path])
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\nMemFree:         1000 kB\nMemAvailable:    6291456 kB\n")
    monkeypatch.setattr(policy, "PROC_MEMINFO", str(meminfo))
    decision = policy.explain_dataset_num_proc()
    assert decision.host.available_memory_bytes == 6 * GIB
    assert decision.value == 3


class _BlockImport:
    """A meta-path finder that makes importing one top-level module fail, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by test)")
        return None


# 9. Explicit requests are not capped by CPUs ---------------------------------------------------


def test_explicit_request_may_exceed_cpus(host):
    host(cpu_count=2, affinity=2, available_memory_gb=64)
    assert policy.get_dataset_num_proc(12) == 12


# 10. Local ranks share the host ------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"])
def test_ranks_share_cpus(host, variable):
    host(cpu_count=64, available_memory_gb=512, env={variable: "8"})
    decision = policy.explain_dataset_num_proc()
    assert decision.value == 4  # 64 / 8 ranks = 8 CPUs each -> 4
    assert decision.host.local_ranks == 8 and decision.host.local_ranks_source == variable


def test_ranks_share_memory_so_together_they_stay_in_budget(host):
    # 24 GiB * 0.5 = 12 workers for the host; 8 ranks get 1.5 GiB each -> 0.75 worker -> in-process.
    host(cpu_count=64, available_memory_gb=24, env={"LOCAL_WORLD_SIZE": "8"})
    assert policy.get_dataset_num_proc() is None
    assert policy.get_dataset_num_proc(4) is None
    # 4 ranks get 6 GiB each -> 3 workers each, 12 together.
    host(cpu_count=64, available_memory_gb=24, env={"LOCAL_WORLD_SIZE": "4"})
    assert policy.get_dataset_num_proc(8) == 3


def test_single_rank_variable_changes_nothing_and_garbage_is_warned(host, caplog):
    host(cpu_count=16, env={"LOCAL_WORLD_SIZE": "1"})
    assert policy.get_dataset_num_proc() == 8
    host(cpu_count=16, env={"LOCAL_WORLD_SIZE": "eight"})
    assert policy.get_dataset_num_proc() == 8
    assert any("'eight'" in message for message in warnings_logged(caplog))


# 11. Layers --------------------------------------------------------------------------------------


def test_config_layer_writes_serial_as_one_while_forking_works_and_none_when_not(host):
    host(cpu_count=1)
    assert policy.get_dataset_num_proc(serial_as_none=False) == 1
    assert policy.get_dataset_num_proc(serial_as_none=True) is None
    host(cpu_count=1, start_method="spawn")
    assert policy.get_dataset_num_proc(serial_as_none=False) is None


HOST_VARIANTS = [
    dict(cpu_count=1),
    dict(cpu_count=64, available_memory_gb=1),
    dict(cpu_count=64),
    dict(platform="darwin"),
    dict(start_method="spawn"),
    dict(cpu_count=None, available_memory_gb=None),
]
REQUESTS = [None, 0, 1, 2, 8, 64, np.int64(3), 1.5, "4", True]


@pytest.mark.parametrize("fields", HOST_VARIANTS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_layers_never_return_forbidden_values(host, fields):
    host(**fields)
    for desired in REQUESTS:
        at_map = policy.get_dataset_num_proc(desired)
        at_config = policy.get_dataset_num_proc(desired, serial_as_none=False)
        for value in (at_map, at_config):
            assert value is None or (type(value) is int and value >= 1), (desired, value)
        assert at_map != 1
        usable = policy.explain_dataset_num_proc().host.workers_usable
        assert (at_config is not None) if usable else True


# 12. Warnings once through logging, nothing cached -------------------------------------------------


def test_reset_warning_state_allows_a_warning_again(host, caplog):
    host(env={policy.NUM_PROC_ENV_VAR: "banana"})
    policy.get_dataset_num_proc()
    policy.get_dataset_num_proc()
    assert len(warnings_logged(caplog)) == 1
    policy.reset_warning_state()
    policy.get_dataset_num_proc()
    assert len(warnings_logged(caplog)) == 2


def test_answers_are_not_cached_environment(host, monkeypatch):
    host(cpu_count=16)
    assert policy.get_dataset_num_proc() == 8
    monkeypatch.setenv(policy.NUM_PROC_ENV_VAR, "3")
    assert policy.get_dataset_num_proc() == 3


def test_answers_are_not_cached_cgroup_limit(host, monkeypatch, tmp_path):
    host(cpu_count=64, available_memory_gb=512)
    root = tmp_path / "cg"
    _v2_tree(root, {"job": {"memory.max": f"{16 * GIB}\n", "memory.current": "0\n"}}, "job")
    proc = tmp_path / "proc"
    proc.write_text("0::/job\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.get_dataset_num_proc() == 8
    (root / "job" / "memory.max").write_text(f"{4 * GIB}\n")
    assert policy.get_dataset_num_proc() == 2


def test_explain_and_get_agree(host):
    for fields in HOST_VARIANTS:
        host(**fields)
        for desired in REQUESTS:
            for serial_as_none in (True, False):
                decision = policy.explain_dataset_num_proc(desired, serial_as_none=serial_as_none)
                assert decision.value == policy.get_dataset_num_proc(desired, serial_as_none=serial_as_none)


# 13. Bad input never raises ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"banana\n", b"", b"\xff\xfe\x00binary", b"max max max\n", b"-5 100000\n"],
    ids=["word", "empty", "binary", "fields", "negative"],
)
def test_malformed_cgroup_cpu_file_warns_once_and_is_ignored(host, monkeypatch, tmp_path, caplog, content):
    host(cpu_count=16, available_memory_gb=512)
    root = tmp_path / "cg"
    _v2_tree(root, {"job": {}}, "job")
    (root / "job" / "cpu.max").write_bytes(content)
    proc = tmp_path / "proc"
    proc.write_text("0::/job\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.get_dataset_num_proc() == 8
    assert policy.get_dataset_num_proc() == 8
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and "cpu.max" in messages[0]


@pytest.mark.parametrize("content", [b"lots\n", b"", b"\x00\x01"], ids=["word", "empty", "binary"])
def test_malformed_memory_limit_warns_and_is_ignored(host, monkeypatch, tmp_path, caplog, content):
    host(cpu_count=16, available_memory_gb=512)
    root = tmp_path / "cg"
    _v2_tree(root, {"job": {"memory.current": "0\n"}}, "job")
    (root / "job" / "memory.max").write_bytes(content)
    proc = tmp_path / "proc"
    proc.write_text("0::/job\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.get_dataset_num_proc() == 8
    assert any("memory.max" in message for message in warnings_logged(caplog))


def test_unreadable_cgroup_file_warns_and_is_ignored(host, monkeypatch, tmp_path, caplog):
    host(cpu_count=16)
    root = tmp_path / "cg"
    _v2_tree(root, {"job": {}}, "job")
    (root / "job" / "cpu.max").mkdir()  # reading a directory fails like an unreadable file
    proc = tmp_path / "proc"
    proc.write_text("0::/job\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.get_dataset_num_proc() == 8
    assert any("cpu.max" in message for message in warnings_logged(caplog))


def test_missing_proc_on_linux_warns_once_and_still_answers(host, monkeypatch, tmp_path, caplog):
    host(cpu_count=16)
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(tmp_path / "no" / "proc" / "self" / "cgroup"))
    assert policy.get_dataset_num_proc() == 8
    assert policy.get_dataset_num_proc() == 8
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and "container" in messages[0]


def test_psutil_that_raises_and_no_meminfo_is_a_safe_answer(host, caplog):
    host(cpu_count=64, available_memory_gb=None)
    assert policy.get_dataset_num_proc() == 2
    assert any("psutil" in message for message in warnings_logged(caplog))


def test_proc_self_cgroup_with_garbage_lines_is_survivable(host, monkeypatch, tmp_path):
    host(cpu_count=16)
    proc = tmp_path / "proc"
    proc.write_bytes(b"\xff\xff\n::::\n0::relative\n")
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    assert policy.get_dataset_num_proc() == 8


# Captured and hand-built cgroup trees in shared/ -------------------------------------------------

CGROUP_FIXTURES = sorted(
    p for p in (Path(__file__).parent.parent / "shared" / "cgroups").glob("*") if (p / "expected.json").exists()
)


@pytest.mark.parametrize("tree", CGROUP_FIXTURES, ids=lambda p: p.name)
def test_shared_cgroup_trees_read_as_hand_computed(host, monkeypatch, tree):
    host(cpu_count=512, available_memory_gb=4096)
    expected = json.loads((tree / "expected.json").read_text())
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(tree / "root"))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(tree / "proc_self_cgroup"))
    readings = policy.explain_dataset_num_proc().host
    assert dict(readings.cpu_readings)["cgroup cpu quota"] == expected["cpu_limit"]
    assert dict(readings.memory_readings)["cgroup free"] == expected["memory_free_bytes"]


def test_there_are_shared_cgroup_trees():
    assert {"v2_leaf", "v2_systemd_slice", "v1_slurm_job", "hybrid", "this_machine"} <= {
        p.name for p in CGROUP_FIXTURES
    }


# Import cost and the command line ---------------------------------------------------------------


def test_importing_the_policy_pulls_in_only_the_standard_library():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import unsloth_zoo.dataset_num_proc\n"
        "new = {name.split('.')[0] for name in set(sys.modules) - before}\n"
        "print(sorted(new - set(sys.stdlib_module_names) - {'unsloth_zoo'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_cli_json_matches_what_this_machine_reports():
    psutil = pytest.importorskip("psutil")
    result = subprocess.run(
        [sys.executable, "-m", "unsloth_zoo.dataset_num_proc", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != policy.NUM_PROC_ENV_VAR},
    )
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)
    cpus = [os.cpu_count(), len(os.sched_getaffinity(0))]
    quota = dict(decision["host"]["cpu_readings"])["cgroup cpu quota"]
    assert decision["host"]["usable_cpus"] == min(cpus + ([max(int(quota), 1)] if quota else []))
    assert decision["host"]["platform"] == sys.platform
    host_memory = dict(decision["host"]["memory_readings"])["host available"]
    assert abs(host_memory - psutil.virtual_memory().available) < 0.1 * psutil.virtual_memory().total


def test_cli_table_names_the_decision_and_the_layer():
    result = subprocess.run(
        [sys.executable, "-m", "unsloth_zoo.dataset_num_proc", "--num-proc", "1", "--config-layer"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != policy.NUM_PROC_ENV_VAR},
    )
    assert result.returncode == 0, result.stderr
    assert "num_proc" in result.stdout and "config" in result.stdout and "1 (serial)" in result.stdout


# The map's row count (auto only) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, expected", [(1000, None), (8000, None), (9999, None), (10000, 2), (16000, 3), (80000, 8), (None, 8)]
)
def test_rows_keep_small_auto_maps_in_process(host, rows, expected):
    # 8,000 rows of tokenizing ran faster in-process than with 2 workers on the zoo's path (`nox -s bench`).
    host(cpu_count=64, available_memory_gb=512)  # 8 by CPUs; rows // 5000 bounds it
    assert policy.get_dataset_num_proc(rows=rows) == expected


@pytest.mark.parametrize(
    "rows, batched, expected",
    [
        (20000, True, None),  # 20,000 // 12,500 = 1: the demo's map stays in-process
        (24999, True, None),
        (25000, True, 2),
        (100000, True, 8),  # 100,000 // 12,500 = 8
        (20000, False, 4),  # 20,000 // 5,000 = 4: a per-row map repays workers sooner
        (20000, None, 4),  # not said: the per-row floor
    ],
)
def test_batched_maps_ask_more_rows_of_each_worker(host, rows, batched, expected):
    # A batched fast tokenizer already uses every core in-process; a per-row map runs Python once a row.
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(rows=rows, batched=batched) == expected


def test_a_batched_maps_floor_adds_the_closure_weight(host):
    host(cpu_count=64, available_memory_gb=512)
    # 12,500 + 2 x 2,500 = 17,500 rows per worker: 34,999 rows give 1, 35,000 give 2.
    assert policy.get_dataset_num_proc(rows=34999, closure_bytes=2 * MIB, batched=True) is None
    assert policy.get_dataset_num_proc(rows=35000, closure_bytes=2 * MIB, batched=True) == 2


def test_the_rows_step_says_the_map_is_batched(host):
    host(cpu_count=64, available_memory_gb=512)
    decision = policy.explain_dataset_num_proc(rows=20000, batched=True)
    assert decision.batched is True and decision.steps[-1].reason == (
        "20000 rows cannot give 2 workers 12500 rows each (a batched map)"
    )
    assert "batched map" in decision.format_table()
    assert policy.explain_dataset_num_proc(rows=20000).batched is None
    assert policy.explain_dataset_num_proc(rows=20000, batched=False).steps[-1].reason == (
        "20000 rows give 4 workers 5000 rows each (a per-row map)"
    )


def test_batched_never_bounds_an_explicit_request(host):
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(3, rows=20000, batched=True) == 3


@pytest.mark.parametrize(
    "flag, batched, value", [("--batched", True, None), ("--no-batched", False, 4), (None, None, 4)]
)
def test_the_cli_says_whether_the_map_is_batched(host, flag, batched, value):
    host(cpu_count=64, available_memory_gb=512)
    out = io.StringIO()
    assert policy.main(["--rows", "20000", "--json"] + ([flag] if flag else []), stdout=out) == 0
    record = json.loads(out.getvalue())
    assert (record["batched"], record["value"]) == (batched, value)


class _Falsehood:
    def __bool__(self):
        raise RuntimeError("no truth value here")


def test_an_unreadable_batched_warns_once_and_takes_the_per_row_floor(host, caplog):
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(rows=20000, batched=_Falsehood()) == 4
    assert policy.get_dataset_num_proc(rows=20000, batched=_Falsehood()) == 4
    messages = [m for m in warnings_logged(caplog) if "batched" in m]
    assert len(messages) == 1 and "per-row" in messages[0]


def test_rows_never_bound_an_explicit_request(host):
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(6, rows=100) == 6


# resolve_responses_only_num_proc -------------------------------------------------------------------


class _Trainer:
    def __init__(self, train, eval_=None) -> None:
        self.train_dataset, self.eval_dataset = train, eval_


class _Streaming:
    """A split without a length, like datasets.IterableDataset."""

    def __len__(self):
        raise TypeError("streaming datasets have no length")


def test_responses_only_small_splits_stay_none(host):
    host(cpu_count=64)
    assert policy.resolve_responses_only_num_proc(_Trainer(range(100), range(10))) is None


def test_responses_only_serial_on_large_split_is_one_not_auto(host):
    host(cpu_count=64)
    assert policy.resolve_responses_only_num_proc(_Trainer(range(9000)), num_proc=1) == 1
    assert policy.resolve_responses_only_num_proc(_Trainer(range(9000)), num_proc=0) == 1
    host(cpu_count=64, available_memory_gb=1)  # the policy says in-process: the zoo must not auto-size
    assert policy.resolve_responses_only_num_proc(_Trainer(range(9000))) == 1


def test_responses_only_streaming_split_does_not_hide_a_sized_one(host):
    host(cpu_count=64)
    trainer = _Trainer(_Streaming(), {"eval": range(20000)})
    assert policy.resolve_responses_only_num_proc(trainer, num_proc=1) == 1


def test_responses_only_hatch_wins(host, monkeypatch):
    host(cpu_count=64)
    monkeypatch.setenv(policy.NUM_PROC_ENV_VAR, "5")
    assert policy.resolve_responses_only_num_proc(_Trainer(range(10)), num_proc=1) == 5
    monkeypatch.setenv(policy.NUM_PROC_ENV_VAR, "0")
    assert policy.resolve_responses_only_num_proc(_Trainer(range(9000)), num_proc=8) == 1
    assert policy.resolve_responses_only_num_proc(_Trainer(range(10)), num_proc=8) is None


def test_responses_only_auto_on_a_large_split_gets_the_policy_count(host):
    host(cpu_count=16, available_memory_gb=512)
    assert policy.resolve_responses_only_num_proc(_Trainer(range(16000))) == 3  # 8 by CPUs, 16000 // 5000 = 3


@pytest.mark.parametrize("desired, rows, expected", [(4, 1, None), (4, 3, 3), (8, 2, 2), (None, 0, None)])
def test_never_more_workers_than_rows(host, desired, rows, expected):
    # datasets lowers num_proc to the row count, so 4 workers for 1 row would become a Pool(1).
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(desired, rows=rows) == expected


# The mapped closure's weight (auto only) ---------------------------------------------------------

MIB = 2**20


@pytest.mark.parametrize(
    "rows, closure_bytes, expected",
    [
        (16000, 7 * MIB, None),  # 5,000 + 7 x 2,500 = 22,500 rows per worker: 16,000 rows stay in-process
        (16000, MIB // 8, 3),  # 5,000 + 312 = 5,312 rows per worker: 16000 // 5312 = 3
        (90000, 7 * MIB, 4),  # 90,000 // 22,500 = 4
        (80000, None, 8),  # weight unknown: rows alone, 80,000 // 5,000 = 16, capped at 8
    ],
)
def test_heavy_closures_need_more_rows_per_worker(host, rows, closure_bytes, expected):
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(rows=rows, closure_bytes=closure_bytes) == expected


def test_closure_weight_never_bounds_an_explicit_request(host):
    host(cpu_count=64, available_memory_gb=512)
    assert policy.get_dataset_num_proc(4, rows=8000, closure_bytes=50 * MIB) == 4


class _CountedPickle:
    """Pickles to `size` bytes and counts how often it was pickled."""

    def __init__(self, size):
        self.size, self.pickled = size, 0

    def __reduce__(self):
        self.pickled += 1
        return (bytes, (b"x" * self.size,))


def test_a_closure_is_not_pickled_when_rows_alone_keep_the_map_in_process(host):
    # Measuring a 7 MiB tokenizer takes a sixth of a second: a 1,000-row map must not pay it.
    host(cpu_count=64, available_memory_gb=512)
    closure = _CountedPickle(7 * MIB)
    decision = policy.explain_dataset_num_proc(rows=1000, closure=closure)
    assert (decision.value, closure.pickled, decision.closure_bytes) == (None, 0, None)
    assert policy.get_dataset_num_proc(6, rows=100_000, closure=closure) == 6 and closure.pickled == 0


def test_a_closure_is_weighed_when_rows_leave_room_for_workers(host):
    host(cpu_count=64, available_memory_gb=512)
    closure = _CountedPickle(7 * MIB)
    decision = policy.explain_dataset_num_proc(rows=16000, closure=closure)
    assert (decision.value, closure.pickled) == (None, 1)
    assert decision.closure_bytes >= 7 * MIB
    # A known size is a floor the measured object can only raise.
    assert policy.get_dataset_num_proc(rows=16000, closure_bytes=7 * MIB, closure=_CountedPickle(10)) is None
    assert policy.get_dataset_num_proc(rows=16000, closure=_CountedPickle(10)) == 3


class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("no pickling here")


def test_a_closure_that_cannot_be_pickled_leaves_the_rows_answer(host):
    host(cpu_count=64, available_memory_gb=512)
    decision = policy.explain_dataset_num_proc(rows=16000, closure=_Unpicklable())
    assert (decision.value, decision.closure_bytes) == (3, None)
    assert policy.get_dataset_num_proc(rows=16000, closure_bytes=7 * MIB, closure=_Unpicklable()) is None


def test_pickled_size_measures_and_survives_the_unpicklable():
    assert policy.pickled_size(b"x" * 1000) >= 1000
    assert policy.pickled_size(lambda row: row) > 0  # dill, as workers receive it, takes a lambda
    assert policy.pickled_size(x for x in range(3)) is None  # not even dill takes a generator
