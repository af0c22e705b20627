"""Fake the operating system's answers for a simulated host, never the policy's own functions.

Tests apply a `HostProfile` through pytest's `monkeypatch`; the host-matrix tool through `Patcher`.
Both fake the same things: `sys.platform`, `os.cpu_count`, `os.sched_getaffinity`, the `psutil` and
`multiprocess` modules, stdlib `multiprocessing`'s start-method answers, environment variables, and a
cgroup tree on disk that the policy module's path constants are pointed at.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import types
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

GIB = 1024**3
POLICY_ENV_VARS = (
    "UNSLOTH_DATASET_NUM_PROC",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_NTASKS_PER_NODE",
)
_ALL_METHODS = {"win32": ["spawn"], "darwin": ["spawn", "fork", "forkserver"]}
_LINUX_METHODS = ["fork", "spawn", "forkserver"]


@dataclasses.dataclass(frozen=True)
class CgroupSpec:
    """A cgroup this process sits in: CPU quota in CPUs, memory in GiB; None means unlimited."""

    version: str = "v2"
    cpu_quota: Optional[float] = None
    memory_limit_gb: Optional[float] = None
    memory_usage_gb: float = 0.0
    inactive_file_gb: float = 0.0


@dataclasses.dataclass(frozen=True)
class HostProfile:
    platform: str = "linux"
    cpu_count: Optional[int] = 8
    affinity: Optional[int] = None  # None: the platform has no sched_getaffinity
    start_method: Optional[str] = "fork"  # what `multiprocess` reports; None: not installed
    start_method_pinned: bool = False
    stdlib_start_method: Optional[str] = None  # None: agrees with start_method
    available_memory_gb: Optional[float] = 64.0  # None: psutil raises and /proc/meminfo is gone
    cgroup: Optional[CgroupSpec] = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


class Patcher:
    """The subset of pytest's MonkeyPatch the fakes need, for use outside pytest."""

    def __init__(self) -> None:
        self._undo: list = []

    def setattr(self, target: Any, name: str, value: Any, raising: bool = True) -> None:
        missing = not hasattr(target, name)
        if missing and raising:
            raise AttributeError(name)
        old = getattr(target, name, None)
        self._undo.append(lambda: delattr(target, name) if missing else setattr(target, name, old))
        setattr(target, name, value)

    def delattr(self, target: Any, name: str, raising: bool = True) -> None:
        if not hasattr(target, name):
            if raising:
                raise AttributeError(name)
            return
        old = getattr(target, name)
        self._undo.append(lambda: setattr(target, name, old))
        delattr(target, name)

    def setitem(self, mapping: Any, key: Any, value: Any) -> None:
        missing = key not in mapping
        old = mapping.get(key)
        self._undo.append(lambda: mapping.pop(key, None) if missing else mapping.__setitem__(key, old))
        mapping[key] = value

    def delitem(self, mapping: Any, key: Any, raising: bool = True) -> None:
        if key not in mapping:
            if raising:
                raise KeyError(key)
            return
        old = mapping[key]
        self._undo.append(lambda: mapping.__setitem__(key, old))
        del mapping[key]

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


class _FakeDefaultContext:
    """Answers like multiprocessing's module-level DefaultContext: the default is its own, the list order is fixed."""

    def __init__(self, platform: str, method: str, pinned: bool) -> None:
        self._default_context = types.SimpleNamespace(_name=method)
        self._actual_context = self._default_context if pinned else None
        self._platform = platform

    def get_start_method(self, allow_none: bool = False) -> Optional[str]:
        if self._actual_context is None:
            if allow_none:
                return None
            self._actual_context = self._default_context
        return self._actual_context._name

    def get_all_start_methods(self) -> list:
        # Real libraries list methods in a fixed platform order, not default first (macOS lists spawn first).
        return list(_ALL_METHODS.get(self._platform, _LINUX_METHODS))


def fake_start_method_module(name: str, platform: str, method: str, pinned: bool) -> types.ModuleType:
    """A module answering like multiprocessing does on `platform`, defaulting to (or pinned at) `method`."""
    context = _FakeDefaultContext(platform, method, pinned)
    module = types.ModuleType(name)
    module.get_start_method = context.get_start_method
    module.get_all_start_methods = context.get_all_start_methods
    return module


def fake_psutil(available_gb: Optional[float]) -> types.ModuleType:
    module = types.ModuleType("psutil")

    def virtual_memory() -> Any:
        if available_gb is None:
            raise OSError("simulated: memory statistics unavailable")
        return types.SimpleNamespace(available=int(available_gb * GIB), total=int(available_gb * 2 * GIB))

    module.virtual_memory = virtual_memory
    return module


def write_cgroup_tree(root: Path, spec: Optional[CgroupSpec]) -> Path:
    """Lay out /proc/self/cgroup and a cgroup mount under `root`; returns the directory to use."""
    proc = root / "proc_self_cgroup"
    mount = root / "cgroup"
    if proc.exists():
        return root
    mount.mkdir(parents=True, exist_ok=True)
    if spec is None:
        proc.write_text("0::/\n")
        return root
    if spec.version == "v2":
        leaf = mount / "job.slice"
        leaf.mkdir()
        (mount / "cgroup.controllers").write_text("cpu memory pids\n")
        cpu = "max 100000" if spec.cpu_quota is None else f"{int(spec.cpu_quota * 100000)} 100000"
        files = {
            "cpu.max": cpu,
            "memory.max": "max" if spec.memory_limit_gb is None else str(int(spec.memory_limit_gb * GIB)),
            "memory.high": "max",
            "memory.current": str(int(spec.memory_usage_gb * GIB)),
            "memory.stat": f"anon 0\nfile 0\ninactive_file {int(spec.inactive_file_gb * GIB)}\n",
            "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
        }
        for name, text in files.items():
            (leaf / name).write_text(text + "\n")
        proc.write_text("0::/job.slice\n")
        return root
    memory_leaf = mount / "memory" / "slurm" / "job_1"
    cpu_leaf = mount / "cpu,cpuacct" / "slurm" / "job_1"
    memory_leaf.mkdir(parents=True)
    cpu_leaf.mkdir(parents=True)
    unlimited = "9223372036854771712"
    (memory_leaf / "memory.limit_in_bytes").write_text(
        (unlimited if spec.memory_limit_gb is None else str(int(spec.memory_limit_gb * GIB))) + "\n"
    )
    (memory_leaf / "memory.usage_in_bytes").write_text(f"{int(spec.memory_usage_gb * GIB)}\n")
    (memory_leaf / "memory.stat").write_text(f"cache 0\ntotal_inactive_file {int(spec.inactive_file_gb * GIB)}\n")
    (memory_leaf / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (cpu_leaf / "cpu.cfs_quota_us").write_text(
        ("-1" if spec.cpu_quota is None else str(int(spec.cpu_quota * 100000))) + "\n"
    )
    (cpu_leaf / "cpu.cfs_period_us").write_text("100000\n")
    proc.write_text("5:memory:/slurm/job_1\n4:cpu,cpuacct:/slurm/job_1\n0::/\n")
    return root


def apply_host(patch: Any, profile: HostProfile, tree: Path, policy_modules: Iterable[types.ModuleType]) -> None:
    """Make this process answer like `profile`; `tree` is a directory for the cgroup files (reused if present)."""
    patch.setattr(sys, "platform", profile.platform)
    patch.setattr(os, "cpu_count", lambda: profile.cpu_count)
    if profile.affinity is None:
        patch.delattr(os, "sched_getaffinity", raising=False)
    else:
        patch.setattr(os, "sched_getaffinity", lambda pid: set(range(profile.affinity)), raising=False)

    if profile.start_method is None:
        patch.setitem(sys.modules, "multiprocess", None)
    else:
        patch.setitem(
            sys.modules,
            "multiprocess",
            fake_start_method_module(
                "multiprocess", profile.platform, profile.start_method, profile.start_method_pinned
            ),
        )
    stdlib = fake_start_method_module(
        "multiprocessing", profile.platform, profile.stdlib_start_method or profile.start_method or "spawn", False
    )
    patch.setattr(multiprocessing, "get_start_method", stdlib.get_start_method)
    patch.setattr(multiprocessing, "get_all_start_methods", stdlib.get_all_start_methods)
    patch.setitem(sys.modules, "psutil", fake_psutil(profile.available_memory_gb))

    for name in POLICY_ENV_VARS:
        patch.delitem(os.environ, name, raising=False)
    for name, value in profile.env.items():
        patch.setitem(os.environ, name, value)

    write_cgroup_tree(tree, profile.cgroup)
    for module in policy_modules:
        patch.setattr(module, "CGROUP_ROOT", str(tree / "cgroup"))
        patch.setattr(module, "PROC_SELF_CGROUP", str(tree / "proc_self_cgroup"))
        patch.setattr(module, "PROC_MEMINFO", str(tree / "no_meminfo"))
