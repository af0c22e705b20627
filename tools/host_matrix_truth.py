"""What a host cell really offers, worked out from the cell's own inputs and never read back from the policy.

Memory budgets use exact fractions, so a boundary case is judged by arithmetic, not by float rounding.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Optional

from tools.host_matrix_axes import (
    CGROUP_HEADROOM_GB,
    CGROUP_INACTIVE_FILE_GB,
    CGROUP_USAGE_GB,
    HATCH_MEANINGS,
    QUOTA_FRACTION,
    ROOMY_CPU_COUNT,
    ROOMY_HOST_MEMORY_GB,
    HostCell,
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
