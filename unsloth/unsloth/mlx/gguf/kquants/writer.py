# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Write one GGUF file in a K-quant mix, each tensor in the type `mix.choose_types` gives it; the file appears
whole or not at all.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from .blocks import BLOCK_BYTES, quantize_k
from .mix import ModelShape, choose_types


def model_shape(config: Mapping[str, Any], architecture: str) -> ModelShape:
    """The hyperparameters llama.cpp's type choice reads, from a Hugging Face config."""
    heads = int(config["num_attention_heads"])
    named = ("num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts")
    experts = next((config[key] for key in named if config.get(key)), 0)
    return ModelShape(
        architecture=architecture,
        layers=int(config["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        experts=int(experts),
    )


def encode(data: np.ndarray, type_name: str) -> np.ndarray:
    """One tensor in one type: K-quants here, the 32-wide legacy types by the `gguf` package (byte-identical to
    llama.cpp's reference encoders), F16 and F32 as IEEE floats."""
    import gguf

    if type_name == "F32":
        return np.ascontiguousarray(data, dtype=np.float32)
    if type_name == "F16":
        return np.ascontiguousarray(data, dtype=np.float32).astype(np.float16)
    if type_name in BLOCK_BYTES:
        return quantize_k(data, type_name)
    return gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), gguf.GGMLQuantizationType[type_name])


def mix_types(method: str, tensors: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> Dict[str, str]:
    """Each tensor's type in the K-quant mix `method`, as llama.cpp's quantizer chooses it."""
    from ..convert import family_for

    architecture = family_for(dict(config)).architecture
    return choose_types(method, {key: value.shape for key, value in tensors.items()}, model_shape(config, architecture))


class EncodedOnce:
    """Several mixes of one export give many tensors the same type (Q6_K output, Q4_K attention): each pair of
    tensor and type is encoded once, and kept only until the last mix that uses it is written."""

    def __init__(self, plans: Iterable[Mapping[str, str]]) -> None:
        self._uses: Counter[Tuple[str, str]] = Counter(pair for types in plans for pair in types.items())
        self._kept: Dict[Tuple[str, str], np.ndarray] = {}

    def encode(self, tensor_name: str, data: np.ndarray, type_name: str) -> np.ndarray:
        key = (tensor_name, type_name)
        self._uses[key] -= 1
        encoded = self._kept[key] if key in self._kept else encode(data, type_name)
        if self._uses[key] > 0:
            self._kept[key] = encoded
        else:
            self._kept.pop(key, None)
        return encoded


def write_mix(
    path: Path,
    tensors: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    tokenizer_keys: Mapping[str, Any],
    method: str,
    name: str = "unsloth",
    shared: Optional[EncodedOnce] = None,
) -> Dict[str, str]:
    """Write `path` in the K-quant mix `method`; returns each tensor's type. A failure leaves no file behind.
    `shared` encodes what the export's other mixes also write only once."""
    import gguf

    from ..convert import family_for, write_hyperparameters
    from ..file_types import llama_file_type

    family = family_for(dict(config))
    types = mix_types(method, tensors, config)
    path = Path(path)
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(handle)
    try:
        writer = gguf.GGUFWriter(partial, family.architecture)
        writer.add_name(name)
        write_hyperparameters(writer, dict(config))
        for key, (value, value_type, item_type) in tokenizer_keys.items():
            item = None if item_type is None else gguf.GGUFValueType[item_type]
            writer.add_key_value(key, value, gguf.GGUFValueType[value_type], item)
        writer.add_file_type(llama_file_type(method))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for tensor_name, data in tensors.items():
            kind = types[tensor_name]
            encoded = encode(data, kind) if shared is None else shared.encode(tensor_name, data, kind)
            if kind in ("F32", "F16"):
                writer.add_tensor(tensor_name, encoded)
            else:
                writer.add_tensor(tensor_name, encoded, raw_dtype=gguf.GGMLQuantizationType[kind])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
    return types
