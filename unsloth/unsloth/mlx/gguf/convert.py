# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Hugging Face weights and config to GGUF tensors and metadata, for the families the notebooks train.

The model's type is looked up in `registry`; its `Converter` (in `converters/`) holds what the family needs
beyond the common path: refusals, weight preparation, tensor splits and names, rope tensors and keys. This module
only runs those hooks in order, renames through the `gguf` package's maps, applies the `Family` flags (llama's
rotary row order, Gemma's `1 + weight` norms), and `write_gguf` stores the tensors with `GGUFWriter`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from .converters.base import Converter, interleave_rotary_rows
from .converters.base import rope_base as _base_rope, rope_scaling as _rope_scaling
from .coverage import verdict
from .families import POOLING_KEY, Family, UnsupportedModel
from .registry import FAMILIES, converter_for, embedding_converters
from .tokenizer import TokenizerKeys


def _converter(config: Dict[str, Any]) -> Converter:
    """The registered converter of the config's model type; an unregistered type is refused with the table's reason."""
    model_type = str(config.get("model_type"))
    if config.get(POOLING_KEY):
        return _embedding_converter(model_type)
    converter = converter_for(model_type)
    if converter is None:
        reason = verdict(model_type, config.get("architectures") or ()).reason
        raise UnsupportedModel(
            f"GGUF export on MLX cannot write model_type {model_type!r}: {reason} (docs/gguf.md lists every type; "
            f"exported: {', '.join(sorted(FAMILIES))})"
        )
    return converter


def _embedding_converter(model_type: str) -> Converter:
    converter = embedding_converters().get(model_type)
    if converter is None:
        raise UnsupportedModel(
            f"GGUF export on MLX cannot write a {model_type!r} embedding model "
            f"(exported: {', '.join(sorted(embedding_converters()))})"
        )
    return converter


def family_for(config: Dict[str, Any]) -> Family:
    """The architecture written for this config, after its family's refusals."""
    converter = _converter(config)
    converter.refuse(config)
    return converter.family_for(config)


def with_common_keys(config: Dict[str, Any]) -> Dict[str, Any]:
    """The config with the keys the common path reads (`num_hidden_layers`, `hidden_size`, ...) as mlx_lm builds the
    model; every later step reads this one."""
    return _converter(config).with_common_keys(config)


def with_weight_settings(config: Dict[str, Any], weights: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """The config with the settings the model keeps as weights and llama.cpp reads as keys."""
    return _converter(config).with_weight_settings(config, weights)


def embedding_weight(config: Dict[str, Any]) -> str:
    """The token embedding's name in mlx_lm's model of this config."""
    return _converter(config).embedding_weight


def rope_base(config: Dict[str, Any], local: bool = False) -> float:
    """The rotary base of the global layers, or with `local=True` of Gemma 3's local ones."""
    converter = converter_for(str(config.get("model_type")))
    return converter.rope_base(config, local) if converter else _base_rope(config, local)


def rope_scaling(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The rope scaling as llama.cpp will apply it, None when plain; one it would not apply alike is refused."""
    converter = converter_for(str(config.get("model_type")))
    return converter.rope_scaling(config) if converter else _rope_scaling(config, None)


def gguf_tensors(weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """Every weight under its llama.cpp name, in llama.cpp's layout, as float32; an unmapped weight is an error."""
    converter = _converter(config)
    family = family_for(config)
    names = converter.tensor_names(family, config)
    heads, kv_heads = int(config.get("num_attention_heads") or 0), int(config.get("num_key_value_heads") or 0)
    tensors: Dict[str, np.ndarray] = {}
    weights = converter.prepare_weights(weights, config)
    pieces = (
        piece
        for name, value in weights.items()
        if not (family.tied_only and name == "lm_head.weight")
        for piece in converter.split_weight(name, np.asarray(value, dtype=np.float32), config)
    )
    for name, data, named in pieces:
        target = name if named else names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise UnsupportedModel(f"no llama.cpp {family.architecture} tensor for the weight {name!r}")
        if family.permute_rotary and name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            data = interleave_rotary_rows(data, heads)
        elif family.permute_rotary and name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            data = interleave_rotary_rows(data, kv_heads or heads)
        if family.norm_offset and name.endswith("norm.weight"):
            data = data + np.float32(family.norm_offset)
        tensors[target] = data
    if family.output_required and "output.weight" not in tensors:
        tensors["output.weight"] = tensors["token_embd.weight"].copy()
    tensors.update(converter.rope_tensors(config))
    return tensors


def write_hyperparameters(writer: Any, config: Dict[str, Any]) -> None:
    """The `{arch}.*` keys llama.cpp builds the graph from, as the model's family writes them."""
    family_for(config)  # its refusals first
    _converter(config).write_hyperparameters(writer, config)


# Tensors llama.cpp's kernels read as float32 only (convolution kernels, routers, the position and token type rows
# BERT adds to its embeddings, RWKV-7's fused token-shift mixes), as its converter keeps them.
_FLOAT32_ONLY = re.compile(
    r"(^|\.)(ssm_conv1d(?:_[qkv])?|shortconv\.conv|ffn_gate_inp|position_embd|token_types|time_mix_lerp_fused)\.weight$"
)


def stored_type(data: np.ndarray, wanted: str, name: str = "") -> str:
    """What one tensor is stored as: vectors, norms, suffix-less tensors and `_FLOAT32_ONLY` stay F32; a row
    the type's block does not divide falls back to F16."""
    import gguf

    if data.ndim < 2 or wanted == "F32" or name.endswith("_norm.weight") or _FLOAT32_ONLY.search(name):
        return "F32"
    if name and not name.endswith(".weight"):
        return "F32"
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[wanted]]
    return wanted if data.shape[-1] % block == 0 else "F16"


def _add_keys(writer: Any, keys: TokenizerKeys) -> None:
    import gguf

    for key, (value, value_type, item_type) in keys.items():
        item = None if item_type is None else gguf.GGUFValueType[item_type]
        writer.add_key_value(key, value, gguf.GGUFValueType[value_type], item)


def write_gguf(
    path: Path,
    tensors: Dict[str, np.ndarray],
    config: Dict[str, Any],
    tokenizer: TokenizerKeys,
    type_name: str,
    file_type: Any,
    name: str = "unsloth",
) -> Dict[str, str]:
    """Write one GGUF file with every matrix in `type_name`; returns each tensor's stored type."""
    import gguf

    family = family_for(config)
    writer = gguf.GGUFWriter(str(path), family.architecture)
    writer.add_name(name)
    write_hyperparameters(writer, config)
    _add_keys(writer, tokenizer)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    return write_tensors(writer, tensors, lambda tensor_name, data: stored_type(data, type_name, tensor_name))


def write_tensors(writer: Any, tensors: Dict[str, np.ndarray], type_of: Any) -> Dict[str, str]:
    """Each tensor in the type `type_of(name, data)` names (F32 as it is, others quantized), then the whole file."""
    import gguf

    stored = {}
    for tensor_name, data in tensors.items():
        stored[tensor_name] = type_of(tensor_name, data)
        if stored[tensor_name] == "F32":
            writer.add_tensor(tensor_name, data)
        else:
            kind = gguf.GGMLQuantizationType[stored[tensor_name]]
            writer.add_tensor(tensor_name, gguf.quants.quantize(np.ascontiguousarray(data), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored
