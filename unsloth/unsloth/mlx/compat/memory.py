# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Memory figures for MLX in the shapes `torch.cuda` reports them: exact bytes, current never above peak.

On Apple silicon the total is what Metal recommends one process may use; on the CPU backend it is host memory.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import mlx.core as mx

_lock = threading.Lock()
_reserved_high_water = 0


@dataclass(frozen=True)
class DeviceProperties:
    """What notebooks read off `torch.cuda.get_device_properties(0)`."""

    name: str
    total_memory: int
    major: int = 0
    minor: int = 0
    multi_processor_count: int = 0


def host_memory_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _on_gpu() -> bool:
    return mx.default_device().type == mx.DeviceType.gpu


def _device_info() -> Dict[str, Any]:
    try:
        return dict(mx.device_info())
    except Exception:
        return {}


def total_memory() -> int:
    if _on_gpu():
        info = _device_info()
        for key in ("max_recommended_working_set_size", "memory_size"):
            if info.get(key):
                return int(info[key])
    return host_memory_bytes()


def memory_allocated(device: Optional[Any] = None) -> int:
    return int(mx.get_active_memory())


def memory_reserved(device: Optional[Any] = None) -> int:
    """Active plus cached bytes, like torch's caching allocator; also raises the reserved high-water mark."""
    global _reserved_high_water
    reserved = int(mx.get_active_memory()) + int(mx.get_cache_memory())
    with _lock:
        _reserved_high_water = max(_reserved_high_water, reserved)
    return reserved


def max_memory_allocated(device: Optional[Any] = None) -> int:
    # mlx updates its peak lazily after a reset, so the current figure bounds it from below.
    return max(int(mx.get_peak_memory()), memory_allocated())


def max_memory_reserved(device: Optional[Any] = None) -> int:
    current = memory_reserved()
    with _lock:
        return max(_reserved_high_water, current, int(mx.get_peak_memory()))


def reset_peak_memory_stats(device: Optional[Any] = None) -> None:
    global _reserved_high_water
    mx.reset_peak_memory()
    with _lock:
        _reserved_high_water = 0


def mem_get_info(device: Optional[Any] = None) -> Tuple[int, int]:
    """(free, total) bytes: total as `total_memory()`, free is what the active MLX arrays leave of it."""
    total = total_memory()
    return max(total - memory_allocated(), 0), total


def empty_cache() -> None:
    """Return MLX's cached buffers; releases before `mx.clear_cache` (0.25) keep it at `mx.metal.clear_cache`."""
    clear = getattr(mx, "clear_cache", None) or getattr(getattr(mx, "metal", None), "clear_cache", None)
    if clear is not None:
        clear()


def synchronize(device: Optional[Any] = None) -> None:
    mx.synchronize()


def device_count() -> int:
    return 1


def device_name() -> str:
    info = _device_info()
    name = info.get("device_name") or info.get("architecture") or "unknown"
    return f"{name} (MLX {'Metal' if _on_gpu() else 'CPU'})"


def get_device_properties(device: Optional[Any] = None) -> DeviceProperties:
    return DeviceProperties(name=device_name(), total_memory=total_memory())


def memory_stats() -> Dict[str, int]:
    """Every figure at once, in bytes."""
    free, total = mem_get_info()
    return {
        "allocated_bytes": memory_allocated(),
        "reserved_bytes": memory_reserved(),
        "peak_allocated_bytes": max_memory_allocated(),
        "peak_reserved_bytes": max_memory_reserved(),
        "free_bytes": free,
        "total_bytes": total,
    }


@functools.lru_cache(maxsize=None)
def is_bfloat16_supported() -> bool:
    """Whether this MLX device computes in bfloat16, found by running a bfloat16 matmul once."""
    try:
        probe = mx.ones((2, 2), dtype=mx.bfloat16)
        mx.eval(probe @ probe)
    except Exception:
        return False
    return True


# The older spelling of `is_bfloat16_supported`, imported by many notebooks.
is_bf16_supported = is_bfloat16_supported


def current_device() -> int:
    """The one MLX device, as CUDA ordinal 0."""
    return 0


def set_device(device: Any) -> None:
    """Accept device 0 (or "cuda" / "cuda:0"); MLX has one device, so any other is an error, not a silent no-op."""
    # A torch.device carries its ordinal at .index (strings have an unrelated .index method).
    index = device if isinstance(device, (str, int)) else getattr(device, "index", device)
    if isinstance(index, str):
        text = index.split(":", 1)
        index = 0 if text[0].strip().lower() == "cuda" and (len(text) == 1 or text[1].strip() == "0") else index
    if index not in (0, None):
        raise ValueError(f"set_device({device!r}): MLX has a single device, 0")


_GIB = 1024**3


class GpuMemoryStats(tuple):
    """`(device properties, peak reserved GB, total GB)`, as notebooks unpack it (`gpu_stats.name`); the figures
    are also readable by name (`stats["total_memory_gb"]`)."""

    figures: Dict[str, Any]

    def __new__(cls, properties: DeviceProperties, figures: Dict[str, Any]) -> "GpuMemoryStats":
        stats = super().__new__(cls, (properties, figures["max_reserved_gb"], figures["total_memory_gb"]))
        stats.figures = figures
        return stats

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        return self.figures[key] if isinstance(key, str) else super().__getitem__(key)

    def keys(self) -> Any:
        return self.figures.keys()


def get_gpu_memory_stats() -> GpuMemoryStats:
    """The figures notebooks print before and after training, in GB rounded to 3 places, with the device."""
    free, total = mem_get_info()
    figures = {
        "device": device_name(),
        "total_memory_gb": round(total / _GIB, 3),
        "allocated_gb": round(memory_allocated() / _GIB, 3),
        "reserved_gb": round(memory_reserved() / _GIB, 3),
        "max_allocated_gb": round(max_memory_allocated() / _GIB, 3),
        "max_reserved_gb": round(max_memory_reserved() / _GIB, 3),
        "free_gb": round(free / _GIB, 3),
    }
    return GpuMemoryStats(get_device_properties(), figures)


def clear_gpu_memory() -> None:
    """Collect unreachable Python objects (and the arrays they hold), then return MLX's cached buffers."""
    import gc

    gc.collect()
    mx.synchronize()
    empty_cache()
