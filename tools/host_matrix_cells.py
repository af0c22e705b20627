"""The simulated host matrix's cells: the axes, how one host cell becomes a fake-host profile, and what the
cell really offers, worked out from the cell's own inputs and never read back from the policy.

A host cell fixes everything the operating system would answer (platform, start methods, CPUs,
memory, local ranks, escape hatch); each host cell is then asked every request at every layer.
Platform x start-method pair x CPUs x memory x ranks is a full product; which limit binds (CPU count,
affinity or cgroup quota; host or cgroup memory), the cgroup version, a pinned start method and the
hatch set rotate through it, so every value of each meets every value of the others somewhere.
Memory budgets use exact fractions, so a boundary case is judged by arithmetic, not by float rounding.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from typing import Any, Iterator, Optional, Tuple

import numpy

from tools.kits.fake_host import CgroupSpec, HostProfile

PLATFORMS = ("linux", "darwin", "win32")
START_METHODS = ("fork", "spawn", "forkserver")
CPU_COUNTS = (1, 2, 4, 16, 64, 192)
MEMORY_GB = (0.5, 2.0, 8.0, 32.0, 512.0, None)  # None: unreadable
LOCAL_RANKS = (1, 8)
HATCHES = (None, "0", "1", "4", "64", "banana", "-3")
# Every host meets the unset hatch (first: garbage cells compare with it) and one value of each other
# kind (serial, workers, garbage); the two values of each kind alternate between neighbouring hosts.
HATCH_SETS = ((None, "0", "4", "banana"), (None, "1", "64", "-3"))
LAYERS = ("map", "config")

CPU_BINDINGS = ("cpu_count", "affinity", "cgroup_quota")
MEMORY_BINDINGS = ("host", "cgroup")
CGROUP_VERSIONS = ("v2", "v1")

QUICK_CPU_COUNTS = (1, 16, 192)
QUICK_MEMORY_GB = (0.5, 8.0, 512.0, None)
QUICK_HATCH_SETS = ((None, "1", "64", "banana"),)

# Binding variants put the named limit below these, so the variant's limit is the one that binds.
ROOMY_CPU_COUNT = 256
ROOMY_HOST_MEMORY_GB = 1024.0
# A cgroup-bound cell's limit sits this far above the target, and its working set uses exactly that.
CGROUP_HEADROOM_GB = 1.0
CGROUP_USAGE_GB = 1.5
CGROUP_INACTIVE_FILE_GB = 0.5
# A quota of n + 0.5 CPUs must floor to n usable CPUs.
QUOTA_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class Request:
    """One `desired` argument: a label for reports, the value passed, and what kind of request it is."""

    label: str
    value: Any
    kind: str  # "auto" | "serial" | "explicit"


REQUESTS = (
    Request("auto", None, "auto"),
    Request("0", 0, "serial"),
    Request("1", 1, "serial"),
    Request("2", 2, "explicit"),
    Request("8", 8, "explicit"),
    Request("64", 64, "explicit"),
    Request("numpy.int64(4)", numpy.int64(4), "explicit"),
    Request("2.5", 2.5, "auto"),
    Request("'4'", "4", "auto"),
)
QUICK_REQUESTS = tuple(request for request in REQUESTS if request.label in {"auto", "1", "8", "numpy.int64(4)", "'4'"})

# What each hatch value means, written out by hand rather than parsed, so the tool never shares the policy's parser.
HATCH_MEANINGS = {
    None: ("unset", None),
    "0": ("serial", None),
    "1": ("serial", None),
    "4": ("workers", 4),
    "64": ("workers", 64),
    "banana": ("garbage", None),
    "-3": ("garbage", None),
}


@dataclasses.dataclass(frozen=True)
class HostCell:
    """Everything one simulated host answers; `usable_cpus` and `memory_gb` are the intended binding limits."""

    platform: str
    multiprocess_method: str
    stdlib_method: str
    method_pinned: bool
    usable_cpus: int
    cpu_binding: str
    memory_gb: Optional[float]
    memory_binding: str
    cgroup_version: str
    local_ranks: int
    hatch: Optional[str]


@dataclasses.dataclass(frozen=True)
class Axes:
    start_pairs: Tuple[Tuple[str, str], ...]
    cpu_counts: Tuple[int, ...]
    memory_gb: Tuple[Optional[float], ...]
    hatch_sets: Tuple[Tuple[Optional[str], ...], ...]
    requests: Tuple[Request, ...]

    @property
    def cells_per_host(self) -> int:
        return len(self.requests) * len(LAYERS)


def start_method_pairs() -> Tuple[Tuple[str, str], ...]:
    """(multiprocess, stdlib) pairs: each method agreeing with the stdlib, then disagreeing with it."""
    agreeing = tuple((method, method) for method in START_METHODS)
    # Each disagreeing stdlib answer is the next method round, so a lying `fork` meets a truthful `spawn`.
    disagreeing = tuple((method, START_METHODS[(index + 1) % 3]) for index, method in enumerate(START_METHODS))
    return agreeing + disagreeing


QUICK_START_PAIRS = (("fork", "fork"), ("fork", "spawn"), ("forkserver", "fork"))
FULL_AXES = Axes(start_method_pairs(), CPU_COUNTS, MEMORY_GB, HATCH_SETS, REQUESTS)
QUICK_AXES = Axes(QUICK_START_PAIRS, QUICK_CPU_COUNTS, QUICK_MEMORY_GB, QUICK_HATCH_SETS, QUICK_REQUESTS)


def host_cells(axes: Axes) -> Iterator[HostCell]:
    """Every host cell: a full product of the listed values; binding variants and hatch sets rotate through it.

    The hatch loop is innermost and starts unset, so each garbage-hatch host follows its unset twin.
    """
    listed = (PLATFORMS, axes.start_pairs, axes.cpu_counts, axes.memory_gb, LOCAL_RANKS)
    for platform_index, start_index, cpu_index, memory_index, ranks_index in itertools.product(
        *(range(len(values)) for values in listed)
    ):
        multiprocess_method, stdlib_method = axes.start_pairs[start_index]
        # Rotations chosen so each value of an axis meets every variant somewhere (tests check the pairs).
        hatches = axes.hatch_sets[(cpu_index + memory_index + ranks_index) % len(axes.hatch_sets)]
        shared = dict(
            platform=PLATFORMS[platform_index],
            multiprocess_method=multiprocess_method,
            stdlib_method=stdlib_method,
            method_pinned=(cpu_index + memory_index) % 2 == 1,
            usable_cpus=axes.cpu_counts[cpu_index],
            cpu_binding=CPU_BINDINGS[(memory_index + ranks_index + start_index) % 3],
            memory_gb=axes.memory_gb[memory_index],
            memory_binding=MEMORY_BINDINGS[(cpu_index + start_index + platform_index) % 2],
            cgroup_version=CGROUP_VERSIONS[(cpu_index // 2 + memory_index // 2 + ranks_index) % 2],
            local_ranks=LOCAL_RANKS[ranks_index],
        )
        for hatch in hatches:
            yield HostCell(hatch=hatch, **shared)


def planned_cells(axes: Axes) -> int:
    """How many cells `host_cells` yields times the asks per host: what a run must report having evaluated."""
    hosts = len(PLATFORMS) * len(axes.start_pairs) * len(axes.cpu_counts) * len(axes.memory_gb) * len(LOCAL_RANKS)
    return hosts * len(axes.hatch_sets[0]) * axes.cells_per_host


def cgroup_spec(cell: HostCell) -> Optional[CgroupSpec]:
    """The cgroup the cell's process sits in, or None when neither CPU nor memory is cgroup-bound."""
    quota_bound = cell.cpu_binding == "cgroup_quota"
    memory_bound = cell.memory_binding == "cgroup"
    if not quota_bound and not memory_bound:
        return None
    limit = None
    if memory_bound and cell.memory_gb is not None:
        limit = cell.memory_gb + CGROUP_HEADROOM_GB
    return CgroupSpec(
        version=cell.cgroup_version,
        cpu_quota=cell.usable_cpus + QUOTA_FRACTION if quota_bound else None,
        memory_limit_gb=limit,
        memory_usage_gb=CGROUP_USAGE_GB if memory_bound else 0.0,
        inactive_file_gb=CGROUP_INACTIVE_FILE_GB if memory_bound else 0.0,
    )


def host_profile(cell: HostCell) -> HostProfile:
    cpu_count = cell.usable_cpus if cell.cpu_binding == "cpu_count" else ROOMY_CPU_COUNT
    affinity = {"cpu_count": None, "affinity": cell.usable_cpus, "cgroup_quota": ROOMY_CPU_COUNT}[cell.cpu_binding]
    if cell.memory_gb is None:
        host_memory = None
    else:
        host_memory = cell.memory_gb if cell.memory_binding == "host" else ROOMY_HOST_MEMORY_GB
    # One GPU per rank, always written, so the caller's own CUDA_VISIBLE_DEVICES never leaks into a cell.
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in range(cell.local_ranks))}
    # A single rank sets no rank variable at all, as a plain `python train.py` run would not.
    if cell.local_ranks > 1:
        env["LOCAL_WORLD_SIZE"] = str(cell.local_ranks)
    if cell.hatch is not None:
        env["UNSLOTH_DATASET_NUM_PROC"] = cell.hatch
    return HostProfile(
        platform=cell.platform,
        cpu_count=cpu_count,
        affinity=affinity,
        start_method=cell.multiprocess_method,
        start_method_pinned=cell.method_pinned,
        stdlib_start_method=cell.stdlib_method,
        available_memory_gb=host_memory,
        cgroup=cgroup_spec(cell),
        env=env,
    )


GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Budget:
    """The two public constants that turn memory into a worker count."""

    memory_fraction: float
    worker_gb: float

    def affordable(self, available_bytes: int, ranks: int) -> int:
        """Workers one of `ranks` equal shares of `available_bytes` pays for."""
        share_gib = Fraction(available_bytes, GIB * ranks)
        return math.floor(share_gib * Fraction(self.memory_fraction) / Fraction(self.worker_gb))


@dataclasses.dataclass(frozen=True)
class HostTruth:
    start_method: Optional[str]
    workers_possible: bool
    usable_cpus: int
    available_bytes: Optional[int]
    affordable_per_rank: Optional[int]
    affordable_host: Optional[int]
    hatch_kind: str
    hatch_count: Optional[int]

    @property
    def hatch_decides(self) -> bool:
        return self.hatch_kind in ("serial", "workers")

    def in_process_value(self, layer: str) -> Optional[int]:
        """How a layer writes "no workers": None at a map() call, 1 in a config while forking works."""
        return 1 if layer == "config" and self.workers_possible else None


def offered_start_methods(platform: str) -> frozenset:
    return frozenset({"spawn"}) if platform == "win32" else frozenset({"fork", "spawn", "forkserver"})


def believable_start_method(cell: HostCell) -> Optional[str]:
    """The first library answer the platform can really offer: `multiprocess`, then the stdlib."""
    offered = offered_start_methods(cell.platform)
    for method in (cell.multiprocess_method, cell.stdlib_method):
        if method in offered:
            return method
    return None


def usable_cpus(cell: HostCell) -> int:
    is_linux = cell.platform == "linux"
    if cell.cpu_binding == "cpu_count":
        readings = [cell.usable_cpus]
    elif cell.cpu_binding == "affinity":
        readings = [ROOMY_CPU_COUNT, cell.usable_cpus]
    else:
        # Only Linux has cgroups, so elsewhere the quota is invisible and the roomy counts remain.
        readings = [ROOMY_CPU_COUNT, ROOMY_CPU_COUNT] + ([cell.usable_cpus + QUOTA_FRACTION] if is_linux else [])
    return max(math.floor(min(readings)), 1)


def available_bytes(cell: HostCell) -> Optional[int]:
    if cell.memory_gb is None:
        return None
    if cell.memory_binding == "host":
        return int(cell.memory_gb * GIB)
    host = int(ROOMY_HOST_MEMORY_GB * GIB)
    if cell.platform != "linux":
        return host
    limit = int((cell.memory_gb + CGROUP_HEADROOM_GB) * GIB)
    working_set = int(CGROUP_USAGE_GB * GIB) - int(CGROUP_INACTIVE_FILE_GB * GIB)
    return min(host, max(limit - working_set, 0))


def host_truth(cell: HostCell, budget: Budget) -> HostTruth:
    method = believable_start_method(cell)
    memory = available_bytes(cell)
    hatch_kind, hatch_count = HATCH_MEANINGS[cell.hatch]
    return HostTruth(
        start_method=method,
        workers_possible=cell.platform != "darwin" and method == "fork",
        usable_cpus=usable_cpus(cell),
        available_bytes=memory,
        affordable_per_rank=None if memory is None else budget.affordable(memory, cell.local_ranks),
        affordable_host=None if memory is None else budget.affordable(memory, 1),
        hatch_kind=hatch_kind,
        hatch_count=hatch_count,
    )
