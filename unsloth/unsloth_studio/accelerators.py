# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What accelerators this process can see, read without ever importing `torch`.

`torch` is consulted only when something else already imported it: importing it here would cost
seconds and could initialise a device in a process that never trains.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def _imported_torch() -> Optional[Any]:
    return sys.modules.get("torch")


def count_listed_devices(text: str) -> int:
    """Devices named by a CUDA_VISIBLE_DEVICES value: its non-empty comma-separated entries."""
    return sum(1 for entry in text.split(",") if entry.strip())


def visible_gpu_count() -> int:
    """GPUs visible to this process: CUDA_VISIBLE_DEVICES when set, else an imported torch's count, else 0."""
    listed = os.environ.get(CUDA_VISIBLE_DEVICES)
    if listed is not None:
        return count_listed_devices(listed)
    torch = _imported_torch()
    device_count = getattr(getattr(torch, "cuda", None), "device_count", None)
    if device_count is None:
        return 0
    try:
        count = device_count()
    except Exception:
        return 0
    return count if isinstance(count, int) and count > 0 else 0


def xpu_initialized() -> bool:
    """Whether an already-imported torch has initialised an Intel XPU in this process."""
    xpu = getattr(_imported_torch(), "xpu", None)
    is_available = getattr(xpu, "is_available", None)
    is_initialized = getattr(xpu, "is_initialized", None)
    if is_available is None or is_initialized is None:
        return False
    try:
        return bool(is_available()) and bool(is_initialized())
    except Exception:
        return False
