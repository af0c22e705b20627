# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""llama.cpp file types for an exported GGUF, made with the `gguf` package that ships with llama.cpp.

`mlx_lm`'s converter writes a float32 GGUF; `rewrite_gguf` copies its metadata and re-encodes its tensors in the
requested type, as `llama-quantize --pure` would: every 2-D weight takes the type, 1-D tensors (norms) stay
float32. What can be made is what `gguf.quants` can quantize on this install, probed, never assumed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from .gguf_vocab import REPLACED_KEYS, VocabularyKeys

# llama.cpp's method names with one GGML type for every weight, and the ones that mix K-quant types.
UNIFORM_TYPES = {
    "f32": "F32",
    "f16": "F16",
    "bf16": "BF16",
    "q8_0": "Q8_0",
    "q5_1": "Q5_1",
    "q5_0": "Q5_0",
    "q4_1": "Q4_1",
    "q4_0": "Q4_0",
}
K_QUANT_MIXES = {
    "q2_k": "Q2_K",
    "q3_k_s": "Q3_K",
    "q3_k_m": "Q3_K",
    "q3_k_l": "Q3_K",
    "q4_k_s": "Q4_K",
    "q4_k_m": "Q4_K",
    "q5_k_s": "Q5_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
}
_FILE_TYPES = {
    "F32": "ALL_F32",
    "F16": "MOSTLY_F16",
    "BF16": "MOSTLY_BF16",
    "Q8_0": "MOSTLY_Q8_0",
    "Q5_1": "MOSTLY_Q5_1",
    "Q5_0": "MOSTLY_Q5_0",
    "Q4_1": "MOSTLY_Q4_1",
    "Q4_0": "MOSTLY_Q4_0",
}
# llama.cpp reads token types as signed 32-bit integers and refuses the file otherwise.
_SIGNED_ARRAYS = {"tokenizer.ggml.token_type"}
_HEADER_KEYS = {"general.architecture", "general.alignment", "general.file_type", "general.quantization_version"}


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


def producible_methods() -> Dict[str, str]:
    """Each method name this install can write, with its GGML type."""
    return {method: kind for method, kind in UNIFORM_TYPES.items() if can_quantize(kind)}


def _tensor_type(data: np.ndarray, wanted: str) -> str:
    """What one tensor is stored as: 1-D stays F32; a row the type's block does not divide falls back to F16."""
    import gguf

    if data.ndim < 2 or wanted == "F32":
        return "F32"
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[wanted]]
    return wanted if data.shape[-1] % block == 0 else "F16"


def _encoded(data: np.ndarray, type_name: str) -> Tuple[np.ndarray, object]:
    import gguf

    kind = gguf.GGMLQuantizationType[type_name]
    return gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), kind), kind


def rewrite_gguf(
    source: Path, target: Path, type_name: str, vocabulary: Optional[VocabularyKeys] = None
) -> Dict[str, str]:
    """Write `source`'s metadata and tensors to `target` as llama.cpp file type `type_name`; returns tensor types.

    `vocabulary` replaces the converter's tokenizer keys (see `gguf_vocab`).
    """
    import gguf

    reader = gguf.GGUFReader(str(source))
    architecture = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(target), architecture)
    dropped = _HEADER_KEYS | (set(REPLACED_KEYS) if vocabulary else set())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in dropped:
            continue
        main_type, sub_type = field.types[0], None
        if main_type == gguf.GGUFValueType.ARRAY:
            sub_type = gguf.GGUFValueType.INT32 if key in _SIGNED_ARRAYS else field.types[-1]
        writer.add_key_value(key, field.contents(), main_type, sub_type)
    for key, (value, value_type, item_type) in (vocabulary or {}).items():
        item = None if item_type is None else gguf.GGUFValueType[item_type]
        writer.add_key_value(key, value, gguf.GGUFValueType[value_type], item)
    writer.add_file_type(gguf.LlamaFileType[_FILE_TYPES[type_name]])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    stored = {}
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise ValueError(f"expected float32 tensors from the converter, {tensor.name} is {tensor.tensor_type.name}")
        data = np.asarray(tensor.data, dtype=np.float32).reshape([int(size) for size in reversed(tensor.shape)])
        stored[tensor.name] = _tensor_type(data, type_name)
        if stored[tensor.name] == "F32":
            writer.add_tensor(tensor.name, data)
        else:
            encoded, kind = _encoded(data, stored[tensor.name])
            writer.add_tensor(tensor.name, encoded, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored
