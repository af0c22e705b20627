# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which llama.cpp file types an export can be written in here, and who writes each.

The `gguf` package encodes the uniform types itself (every matrix in one type, norms float32, as
`llama-quantize --pure` does); what it encodes is probed on this install, never assumed. The K-quant mixes are
written by `kquants` in numpy, tensor for tensor as `llama_model_quantize` writes them; llama.cpp is not needed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, List

import numpy as np

from .kquants.mix import MIX_BASE

# llama.cpp's method names with one GGML type for every weight: (type, llama.cpp file type).
UNIFORM_TYPES = {
    "f32": ("F32", "ALL_F32"),
    "f16": ("F16", "MOSTLY_F16"),
    "bf16": ("BF16", "MOSTLY_BF16"),
    "q8_0": ("Q8_0", "MOSTLY_Q8_0"),
    "q5_1": ("Q5_1", "MOSTLY_Q5_1"),
    "q5_0": ("Q5_0", "MOSTLY_Q5_0"),
    "q4_1": ("Q4_1", "MOSTLY_Q4_1"),
    "q4_0": ("Q4_0", "MOSTLY_Q4_0"),
}
# The K-quant mixes, written by `kquants`: method -> the type most tensors get.
K_QUANT_MIXES = MIX_BASE
# CUDA Unsloth's other names for llama.cpp methods; "not_quantized" keeps the model's own float type.
METHOD_ALIASES = {"fast_quantized": "q8_0", "quantized": "q4_k_m"}


def gguf_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("gguf")


@functools.lru_cache(maxsize=None)
def can_quantize(type_name: str) -> bool:
    """Whether this install's `gguf.quants` encodes `type_name` (tried on one block of zeros)."""
    import gguf

    kind = gguf.GGMLQuantizationType[type_name]
    block, _ = gguf.GGML_QUANT_SIZES[kind]
    try:
        gguf.quants.quantize(np.zeros((1, block), dtype=np.float32), kind)
    except NotImplementedError:
        return False
    return True


def available_methods() -> List[str]:
    """Every quantization_method this install can write, CUDA Unsloth's aliases included."""
    methods = [method for method, (kind, _) in UNIFORM_TYPES.items() if can_quantize(kind)]
    methods += list(K_QUANT_MIXES)
    aliases = [alias for alias, method in METHOD_ALIASES.items() if method in methods]
    return ["not_quantized", *aliases, *methods]


def method_key(quantization_method: Any) -> str:
    """A method as the tables spell it: "Q4_K_M", "q4-k-m" and an enum of "q4_k_m" alike."""
    return str(getattr(quantization_method, "value", quantization_method)).strip().lower().replace("-", "_")


def resolve_method(quantization_method: Any, own_float: str = "f32") -> str:
    """The llama.cpp method a `quantization_method` stands for, or an error saying why it cannot be written here."""
    method = "q8_0" if quantization_method is None else method_key(quantization_method)
    method = METHOD_ALIASES.get(method, method)
    if method == "not_quantized":
        method = own_float
    if method in K_QUANT_MIXES or (method in UNIFORM_TYPES and can_quantize(UNIFORM_TYPES[method][0])):
        return method
    if method in UNIFORM_TYPES:
        reason = f"the gguf package ({gguf_version()}) cannot quantize {UNIFORM_TYPES[method][0]}"
    else:
        reason = "it is not a llama.cpp quantization method"
    raise NotImplementedError(
        f"quantization_method={quantization_method!r} cannot be written on MLX: {reason}; "
        f"available here: {', '.join(available_methods())}"
    )


def file_label(method: str) -> str:
    """The type in the file's name: unsloth.Q4_K_M.gguf, unsloth.Q8_0.gguf."""
    return method.upper()


def llama_file_type(method: str) -> Any:
    import gguf

    if method in UNIFORM_TYPES:
        return gguf.LlamaFileType[UNIFORM_TYPES[method][1]]
    return gguf.LlamaFileType[f"MOSTLY_{method.upper()}"]


def quantize_with_llama_cpp(source: Path, target: Path, method: str) -> None:
    """Write `target` from the float32 GGUF `source` with llama.cpp's own quantizer (tests compare ours with it)."""
    import ctypes
    import os

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{method.upper()}")
    params.nthread = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama.cpp's quantizer failed ({status}) writing {method} to {target}")
