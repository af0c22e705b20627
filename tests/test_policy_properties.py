"""Property-based checks of the policy and its CLI, driven only through the operating system's answers.

Hypothesis builds random hosts: cgroup trees (v1, v2, hybrid) whose files hold random text, huge or negative
numbers, or are missing, directories, FIFOs or symlink loops; random /proc/self/cgroup and /proc/meminfo;
random psutil and start-method answers; random escape-hatch and local-rank variables; and requests of odd
types. The invariants are issue 12's. Both tests together are bounded to about a minute.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import multiprocessing
import numbers
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tools.kits.fake_host import Patcher, fake_start_method_module
from unsloth_zoo import dataset_num_proc as policy

# Hundreds of random hosts per test: minutes, so outside the inner loop (`-m "not slow"`).
pytestmark = pytest.mark.slow

# No shrinking: a failure is reported as found, so a failing run stays as bounded as a passing one.

SETTINGS = settings(
    max_examples=250,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MISSING, DIRECTORY, FIFO, LOOP = "<missing>", "<directory>", "<fifo>", "<symlink loop>"
ENV_NAMES = (policy.NUM_PROC_ENV_VAR, *policy.LOCAL_RANK_ENV_VARS)

# --------------------------------------------------------------------------- what the OS may answer

safe_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
huge_digits = st.integers(min_value=19, max_value=6000).flatmap(lambda n: st.sampled_from(["9" * n, "0" * n + "7"]))
numbers_as_text = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**13).map(str),
    huge_digits,
    st.sampled_from(["-" + "9" * 200, "0", "-1", "max", "", "banana", "1e9", "4.0", "²"]),
)
file_body = st.one_of(
    st.sampled_from([MISSING, DIRECTORY, FIFO, LOOP]),
    numbers_as_text.map(lambda text: text + "\n"),
    st.tuples(numbers_as_text, numbers_as_text).map(lambda pair: f"{pair[0]} {pair[1]}\n"),
    st.sampled_from(["inactive_file", "total_inactive_file", "oom_kill"]).flatmap(
        lambda key: numbers_as_text.map(lambda value: f"anon 0\n{key} {value}\n")
    ),
    st.binary(max_size=40),
)
segment = st.sampled_from(["job", "user.slice", "a", "..", ".", "x y", "slurm"])
cgroup_path = st.lists(segment, max_size=3).map(lambda parts: "/" + "/".join(parts))
V2_FILES = ("cpu.max", "memory.max", "memory.high", "memory.current", "memory.stat", "memory.events")
V1_CPU_FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
V1_MEMORY_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "memory.oom_control")


@st.composite
def hosts(draw: Any) -> Dict[str, Any]:
    version = draw(st.sampled_from(["none", "v1", "v2", "hybrid"]))
    path = draw(cgroup_path)
    lines = []
    if version in ("v2", "hybrid"):
        lines.append(f"0::{path}")
    if version in ("v1", "hybrid"):
        lines += [f"4:cpu,cpuacct:{path}", f"5:memory:{path}"]
    lines += draw(st.lists(safe_text, max_size=2))
    proc_self_cgroup = draw(st.one_of(st.just("\n".join(draw(st.permutations(lines))) + "\n"), file_body))
    files = {}
    for level in range(path.count("/") + 1):
        for name in (*V2_FILES, *V1_CPU_FILES, *V1_MEMORY_FILES):
            files[(level, name)] = draw(file_body)
    return {
        "platform": draw(st.sampled_from(["linux", "linux", "darwin", "win32"])),
        "cpu_count": draw(st.one_of(st.none(), st.integers(min_value=-2, max_value=512), st.just(10**400))),
        "affinity": draw(st.one_of(st.none(), st.integers(min_value=0, max_value=256))),
        "start_method": draw(st.sampled_from([None, "fork", "spawn", "forkserver", "bogus"])),
        "pinned": draw(st.booleans()),
        "psutil": draw(
            st.one_of(st.just(MISSING), st.just("raises"), st.integers(min_value=-(2**40), max_value=2**80))
        ),
        "meminfo": draw(st.one_of(file_body, numbers_as_text.map(lambda n: f"MemTotal: 1 kB\nMemAvailable: {n} kB\n"))),
        "version": version,
        "path": path,
        "proc_self_cgroup": proc_self_cgroup,
        "controllers": draw(st.one_of(st.just("cpu memory\n"), file_body)),
        "files": files,
        "env": {
            name: draw(st.one_of(st.none(), safe_text, huge_digits, st.integers(0, 10**40).map(str)))
            for name in ENV_NAMES
        },
    }


def _write(path: Path, body: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if body == MISSING or os.path.lexists(path):
        return  # "." segments can name one file twice, and writing to a FIFO would block the test
    if body == DIRECTORY:
        path.mkdir(exist_ok=True)
    elif body == FIFO:
        os.mkfifo(path)
    elif body == LOOP:
        os.symlink(path.name, path)  # a link to itself: reading fails with ELOOP
    else:
        path.write_bytes(body if isinstance(body, bytes) else body.encode())


def _fake_psutil(answer: Any) -> Optional[types.ModuleType]:
    if answer == MISSING:
        return None  # sys.modules["psutil"] = None makes the import fail
    module = types.ModuleType("psutil")

    def virtual_memory() -> Any:
        if answer == "raises":
            raise OSError("simulated")
        return types.SimpleNamespace(available=answer)

    module.virtual_memory = virtual_memory
    return module


def apply(host: Dict[str, Any], root: Path, patch: Patcher) -> None:
    """Make this process answer like `host`, with its files under `root`."""
    patch.setattr(sys, "platform", host["platform"])
    patch.setattr(os, "cpu_count", lambda: host["cpu_count"])
    if host["affinity"] is None:
        patch.delattr(os, "sched_getaffinity", raising=False)
    else:
        patch.setattr(os, "sched_getaffinity", lambda pid: set(range(host["affinity"])), raising=False)
    method, platform = host["start_method"], host["platform"]
    patch.setitem(
        sys.modules,
        "multiprocess",
        None if method is None else fake_start_method_module("multiprocess", platform, method, host["pinned"]),
    )
    stdlib = fake_start_method_module("multiprocessing", platform, method or "spawn", False)
    patch.setattr(multiprocessing, "get_start_method", stdlib.get_start_method)
    patch.setattr(multiprocessing, "get_all_start_methods", stdlib.get_all_start_methods)
    patch.setitem(sys.modules, "psutil", _fake_psutil(host["psutil"]))
    for name, value in host["env"].items():
        if value is None:
            patch.delitem(os.environ, name, raising=False)
        else:
            patch.setitem(os.environ, name, value)

    mount = root / "cgroup"
    mount.mkdir()
    relative = [part for part in host["path"].split("/") if part]
    v2_root = mount / "unified" if host["version"] == "hybrid" else mount
    if host["version"] in ("v2", "hybrid"):
        _write(v2_root / "cgroup.controllers", host["controllers"])
    for (level, name), body in host["files"].items():
        parts = relative[:level]
        if name in V2_FILES and host["version"] in ("v2", "hybrid"):
            base = v2_root
        elif name in V1_CPU_FILES and host["version"] in ("v1", "hybrid"):
            base = mount / "cpu,cpuacct"
        elif name in V1_MEMORY_FILES and host["version"] in ("v1", "hybrid"):
            base = mount / "memory"
        else:
            continue
        with contextlib.suppress(OSError):  # a file already standing where a directory should be
            _write(base.joinpath(*parts) / name, body)
    _write(root / "proc_self_cgroup", host["proc_self_cgroup"])
    _write(root / "meminfo", host["meminfo"])
    (root / "vmstat").write_text("oom_kill 0\n")
    patch.setattr(policy, "CGROUP_ROOT", str(mount))
    patch.setattr(policy, "PROC_SELF_CGROUP", str(root / "proc_self_cgroup"))
    patch.setattr(policy, "PROC_MEMINFO", str(root / "meminfo"))
    patch.setattr(policy, "PROC_VMSTAT", str(root / "vmstat"))


@contextlib.contextmanager
def simulated(host: Dict[str, Any]) -> Any:
    patch = Patcher()
    with tempfile.TemporaryDirectory() as directory:
        try:
            apply(host, Path(directory), patch)
            yield
        finally:
            patch.undo()


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def warnings_seen() -> Any:
    handler = _Warnings()
    logger = logging.getLogger(policy.__name__)
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


# --------------------------------------------------------------------------- odd requests


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr")


class _EverythingRaises:
    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = object.__hash__  # hypothesis itself hashes what it generates

    def __bool__(self) -> bool:
        raise RuntimeError("bool")

    def __index__(self) -> int:
        raise RuntimeError("index")


class _IntegralThatWillNotConvert:
    def __int__(self) -> int:
        raise OverflowError("int")

    def __repr__(self) -> str:
        return "_IntegralThatWillNotConvert()"


numbers.Integral.register(_IntegralThatWillNotConvert)

odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=0, max_value=6000).map(lambda n: 10**n),
    st.integers(min_value=0, max_value=6000).map(lambda n: -(10**n)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(),
    safe_text,
    st.integers(min_value=-5, max_value=10**9).flatmap(
        lambda n: st.sampled_from([np.int64(n), np.uint64(abs(n)), np.float32(n), np.array(n), np.array(float(n))])
    ),
    st.sampled_from(
        [
            np.int8(-1),
            np.bool_(True),
            np.array([1, 2]),
            _ReprRaises(),
            _EverythingRaises(),
            _IntegralThatWillNotConvert(),
        ]
    ),
)


def _timed(function: Any, *args: Any, **kwargs: Any) -> Any:
    started = time.monotonic()
    value = function(*args, **kwargs)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"{function.__name__} took {elapsed:.2f} s"
    return value


# --------------------------------------------------------------------------- the properties


@SETTINGS
@given(
    host=hosts(),
    desired=odd_values,
    rows=odd_values,
    closure_bytes=odd_values,
    main_first=st.one_of(st.sampled_from([None, "main", "rest", "MAIN", ""]), odd_values),
    batched=odd_values,
)
def test_the_policy_on_any_host_with_any_request(host, desired, rows, closure_bytes, main_first, batched):
    policy.reset_warning_state()
    with simulated(host), warnings_seen() as warnings:
        sizes = dict(rows=rows, closure_bytes=closure_bytes, main_first=main_first, batched=batched)
        at_map = _timed(policy.get_dataset_num_proc, desired, **sizes)
        first_warnings = list(warnings)
        at_config = _timed(policy.get_dataset_num_proc, desired, serial_as_none=False, **sizes)
        map_decision = _timed(policy.explain_dataset_num_proc, desired, **sizes)
        config_decision = _timed(policy.explain_dataset_num_proc, desired, serial_as_none=False, **sizes)

        assert at_map is None or (type(at_map) is int and at_map >= 2), at_map
        assert at_config is None or type(at_config) is int, at_config
        assert at_config is None or at_config >= 2 or (at_config == 1 and config_decision.host.workers_usable)
        assert map_decision.value == at_map and config_decision.value == at_config
        map_decision.format_table()
        json.dumps(map_decision.as_dict())

        # Each warning once, until reset_warning_state(); then the same warnings once more.
        assert len(warnings) == len(set(warnings)), warnings
        policy.reset_warning_state()
        del warnings[:]
        assert _timed(policy.get_dataset_num_proc, desired, **sizes) == at_map
        assert sorted(warnings) == sorted(first_warnings)

        trainer = types.SimpleNamespace(train_dataset=range(9000), eval_dataset=None)
        responses = _timed(policy.resolve_responses_only_num_proc, trainer, desired)
        assert responses is None or type(responses) is int
        assert responses != 1 or map_decision.host.workers_usable


flag_tokens = st.one_of(
    st.sampled_from(
        [
            "--num-proc",
            "--rows",
            "--closure-bytes",
            "--config-layer",
            "--json",
            "--version",
            "--main-first",
            "--batched",
            "--no-batched",
        ]
    ),
    numbers_as_text,
    st.sampled_from(
        ["--num-proc=4", "--rows=-1", "--nope", "-x", "--json=1", "--", "--main-first=rest", "--batched=1"]
    ),
)


@settings(SETTINGS, max_examples=150)
@given(host=hosts(), argv=st.lists(flag_tokens, max_size=5), unknown_flag=st.booleans())
def test_the_cli_answers_or_says_usage(host, argv, unknown_flag):
    if unknown_flag:
        argv = [*argv, "--definitely-not-a-flag"]
    out, err = io.StringIO(), io.StringIO()
    with simulated(host), contextlib.redirect_stderr(err):
        status = _timed(policy.main, argv, stdout=out)
    if unknown_flag:
        assert status == 2
    assert status in (0, 2), status
    flags = argv[: argv.index("--")] if "--" in argv else argv
    if status == 2:
        assert "usage:" in err.getvalue() and "error:" in err.getvalue() and out.getvalue() == ""
    elif "--version" in flags:
        assert " from " in out.getvalue()
    elif "--json" in flags:
        assert json.loads(out.getvalue())["layer"] in ("map", "config")
    else:
        assert out.getvalue().startswith("num_proc")


@pytest.mark.parametrize("argv", [["--num-proc", "four"], ["--rows"], ["--bogus"], ["--closure-bytes", "1.5"]])
def test_a_bad_flag_gets_argparses_message_and_exit_2_in_a_real_process(argv):
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "unsloth_zoo.dataset_num_proc", *argv], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "usage:" in result.stderr and "error:" in result.stderr and "Traceback" not in result.stderr
