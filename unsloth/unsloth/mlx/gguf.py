# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Export a trained MLX model to GGUF with `mlx_lm`'s converter: LoRA folded into the base weights first.

The converter writes unquantized GGUF (tensors keep float32, bfloat16 becomes float16); quantized GGUF types
come from llama.cpp's `llama-quantize` run on this file afterwards.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, Optional

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.checkpoint import SOURCE_PATH_ATTRIBUTE

from .names import normalised_name

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral")
# Each method and the dtype weights are cast to first; None keeps the model's own dtype.
QUANTIZATION_METHODS: Dict[str, Optional[Any]] = {"not_quantized": None, "f32": mx.float32, "f16": mx.float16}
_FILE_LABELS = {mx.float32: "F32", mx.float16: "F16", mx.bfloat16: "F16"}


def merged_weights(model: Any) -> Dict[str, mx.array]:
    """Every weight under its Hugging Face name, with each LoRA layer folded into its linear; the model is untouched."""
    weights = dict(tree_flatten(model.parameters()))
    for name, module in model.named_modules():
        if not hasattr(module, "fuse") or not hasattr(module, "lora_a"):
            continue
        prefix = f"{name}."
        for key in [key for key in weights if key.startswith(prefix)]:
            del weights[key]
        for key, value in tree_flatten(module.fuse(dequantize=True).parameters()):
            weights[prefix + key] = value
    quantized = sorted(key for key in weights if key.endswith(".scales"))
    if quantized:
        raise NotImplementedError(
            f"GGUF export of a quantized MLX model is not supported (quantized tensors: {quantized[:3]} ...)"
        )
    return weights


def model_config(model: Any) -> Dict[str, Any]:
    """The Hugging Face config.json the model was loaded from, else its mlx_lm arguments."""
    source = getattr(model, SOURCE_PATH_ATTRIBUTE, None)
    if source is not None and (Path(source) / "config.json").is_file():
        return json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
    args = getattr(model, "args", None)
    if args is not None and dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    raise ValueError("cannot tell the model's configuration: it was not loaded from a folder and has no mlx_lm args")


def save_pretrained_gguf(
    model: Any, save_directory: str | Path, tokenizer: Any, quantization_method: Any = "not_quantized"
) -> Path:
    """Write `unsloth.<TYPE>.gguf`, with the tokenizer and config it is built from, into `save_directory`."""
    method = normalised_name(quantization_method)
    if method not in QUANTIZATION_METHODS:
        raise NotImplementedError(
            f"quantization_method={quantization_method!r} is not available on MLX: mlx_lm's converter writes "
            f"{', '.join(QUANTIZATION_METHODS)} GGUF only; quantize that file with llama.cpp's llama-quantize"
        )
    config = model_config(model)
    if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise NotImplementedError(
            f"mlx_lm's GGUF converter supports {supported} models, not {config.get('model_type')!r}"
        )
    weights = merged_weights(model)
    dtype = QUANTIZATION_METHODS[method]
    if dtype is not None:
        weights = {name: value.astype(dtype) for name, value in weights.items()}
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    # The converter reads the vocabulary back from tokenizer files in the same folder.
    tokenizer.save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    from mlx_lm.gguf import convert_to_gguf

    label = _FILE_LABELS.get(weights["model.embed_tokens.weight"].dtype, "F32")
    path = folder / f"unsloth.{label}.gguf"
    convert_to_gguf(folder, weights, config, str(path))
    return path
