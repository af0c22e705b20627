# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""CUDA calls a notebook makes through `torch`, answered for MLX: memory figures from mlx, moves to "cuda" as no-ops.

These run on an already-imported `torch` (or `transformers.tokenization_utils_base`) handed in by the import hook;
this module never imports either itself. Each patch marks what it replaced so applying it twice changes nothing.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

from . import memory

SHIM_MARK = "__unsloth_mlx_shim__"
CUDA_MEMORY_FUNCTIONS = {
    "mem_get_info": memory.mem_get_info,
    "memory_allocated": memory.memory_allocated,
    "memory_reserved": memory.memory_reserved,
    "max_memory_allocated": memory.max_memory_allocated,
    "max_memory_reserved": memory.max_memory_reserved,
    "reset_peak_memory_stats": memory.reset_peak_memory_stats,
    "empty_cache": memory.empty_cache,
    "synchronize": memory.synchronize,
    "device_count": memory.device_count,
    "get_device_properties": memory.get_device_properties,
    "current_device": memory.current_device,
    "set_device": memory.set_device,
}


def is_cuda_target(value: Any) -> bool:
    """ "cuda", "cuda:0", a CUDA `torch.device`, or a bare device index (which torch reads as a CUDA ordinal)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, str):
        return value.split(":", 1)[0].strip().lower() == "cuda"
    return getattr(value, "type", None) == "cuda"


def _marked(function: Callable) -> Callable:
    setattr(function, SHIM_MARK, True)
    return function


def _is_shim(function: Any) -> bool:
    return bool(getattr(function, SHIM_MARK, False))


# What follows the device in `Tensor.to(device, dtype, non_blocking, copy)`, as `torch.nn.Module.to` passes them.
_AFTER_DEVICE = ("dtype", "non_blocking", "copy")


def _tensor_to(original: Callable) -> Callable:
    @functools.wraps(original)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        rest = list(args)
        moved = False
        if rest and is_cuda_target(rest[0]):
            rest.pop(0)
            moved = True
        if "device" in kwargs and is_cuda_target(kwargs["device"]):
            kwargs = {key: value for key, value in kwargs.items() if key != "device"}
            moved = True
        if not moved:
            return original(self, *args, **kwargs)
        # MLX shares one memory with the host, so a move to "cuda" alone leaves the tensor where it is.
        asked = {**dict(zip(_AFTER_DEVICE, rest)), **kwargs}
        # A module's `.to("cuda")` passes dtype=None for its integer buffers, which no overload without a device takes.
        if asked.get("dtype", 0) is None:
            del asked["dtype"]
        still_asked = {key for key in asked if key != "non_blocking"}
        return original(self, **asked) if still_asked else self

    return _marked(to)


def _tensor_cuda(original: Callable) -> Callable:
    @functools.wraps(original)
    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    return _marked(cuda)


def _batch_encoding_to(original: Callable) -> Callable:
    @functools.wraps(original)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("device")
        return self if is_cuda_target(target) else original(self, *args, **kwargs)

    return _marked(to)


def apply_torch_shims(torch: ModuleType) -> None:
    """Point `torch.cuda`'s memory calls at MLX and make moves to "cuda" no-ops on tensors."""
    for name, function in CUDA_MEMORY_FUNCTIONS.items():
        setattr(torch.cuda, name, function)
    tensor = torch.Tensor
    if not _is_shim(tensor.to):
        tensor.to = _tensor_to(tensor.to)
    if not _is_shim(tensor.cuda):
        tensor.cuda = _tensor_cuda(tensor.cuda)


def apply_batch_encoding_shim(tokenization_utils_base: ModuleType) -> None:
    """`tokenizer(...).to("cuda")` returns the encoding itself; any other target goes to transformers unchanged."""
    batch_encoding = tokenization_utils_base.BatchEncoding
    if not _is_shim(batch_encoding.to):
        batch_encoding.to = _batch_encoding_to(batch_encoding.to)


def apply_batch_feature_shim(feature_extraction_utils: ModuleType) -> None:
    """`processor(image, text).to("cuda")` returns the batch itself, as for a tokenizer's encoding."""
    batch_feature = feature_extraction_utils.BatchFeature
    if not _is_shim(batch_feature.to):
        batch_feature.to = _batch_encoding_to(batch_feature.to)
