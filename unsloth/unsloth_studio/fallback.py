# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Worker counts Studio can decide on its own, without the dataset worker-count policy.

This is deliberately cruder than the policy: it reads no start method, memory, cgroup or escape hatch,
so it stays conservative (a third of the CPUs, explicit requests bounded by the CPUs).
"""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any, Optional

from .caps import STUDIO_NUM_PROC_CAP, apply_multi_gpu_cap

# Forking is unavailable on Windows and unsafe on macOS, so maps there always run in-process.
IN_PROCESS_PLATFORMS = ("win32", "darwin")
# Auto-sizing takes one CPU in this many, leaving the rest to the tokenizer threads and the trainer.
AUTO_CPU_SHARE = 3


def workers_unusable_here() -> bool:
    return sys.platform in IN_PROCESS_PLATFORMS


def usable_cpus() -> Optional[int]:
    """The smaller of os.cpu_count() and the affinity mask's size; None when neither is known."""
    readings = []
    try:
        readings.append(os.cpu_count())
    except Exception:
        pass
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            readings.append(len(getaffinity(0)))
        except Exception:
            pass
    known = [value for value in readings if isinstance(value, int) and value > 0]
    return min(known) if known else None


def _is_explicit(desired: Any) -> bool:
    return isinstance(desired, numbers.Integral) and not isinstance(desired, bool)


def safe_num_proc(desired: Any = None) -> int:
    """A worker count >= 1 (1 = in-process): a third of the usable CPUs for auto, else `desired` up to the CPUs.

    Auto is capped at STUDIO_NUM_PROC_CAP; every answer is capped at MULTI_GPU_NUM_PROC_CAP when more
    than one GPU is visible. Anything but an integer (None included) asks for auto.
    """
    if workers_unusable_here():
        return 1
    cpus = usable_cpus() or 1
    if _is_explicit(desired):
        count = min(int(desired), cpus)
    else:
        count = min(cpus // AUTO_CPU_SHARE, STUDIO_NUM_PROC_CAP)
    return max(apply_multi_gpu_cap(count) or 1, 1)


def safe_num_proc_for_layer(desired: Any = None, *, serial_as_none: bool = True) -> Optional[int]:
    """safe_num_proc's answer in a layer's encoding: in-process is None at a map() call, 1 in a config where workers work."""
    count = safe_num_proc(desired)
    if count > 1:
        return count
    if serial_as_none or workers_unusable_here():
        return None
    return 1
