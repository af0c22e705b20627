# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`model.save_pretrained_merged` on MLX: LoRA folded into the base, a quantized base dequantized first.

The folder it writes is a Hugging Face model folder (config.json, model.safetensors, tokenizer files) that
mlx_lm and transformers both load; the model in memory is left as it was, still quantized and still adapted.
`merged_4bit` writes MLX's 4-bit format instead (what `mlx_lm.convert -q` writes), which mlx_lm loads, and
`mxfp4`, for gpt-oss models, MLX's mxfp4 format (what `mlx_lm.convert -q --q-mode mxfp4` writes).
`model.save_pretrained_gguf` hands the same merged float weights and config to the `gguf` layer, which writes the files.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.checkpoint import save_model_files, source_config

from ..gguf.export import DEFAULT_QUANTIZATION_METHOD, check_request, requested_methods, write_files

from .keywords import normalised_name
from .quantize import dequantized_copy

SAVE_METHODS = ("merged_16bit", "merged_32bit", "merged_4bit", "mxfp4", "lora")
# gpt-oss ships its experts in mxfp4; other families were never trained or published in it.
MXFP4_MODEL_TYPES = ("gpt_oss",)
# mlx_lm.convert -q's defaults.
FOUR_BIT_GROUP_SIZE = 64
FOUR_BIT_NOTE = (
    "save_method='merged_4bit' on MLX writes MLX's 4-bit format (mlx_lm.convert -q: group size 64), which mlx_lm "
    "loads; it is not bitsandbytes' 4-bit format, which CUDA Unsloth writes"
)
_QUANTIZATION_KEYS = ("quantization", "quantization_config")
# Keywords CUDA notebooks pass that change nothing about the files written here.
_INERT = {"maximum_memory_usage", "safe_serialization", "max_shard_size", "temporary_location", "push_to_hub"}


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
    config = source_config(model)  # with the RoPE scaling a longer max_seq_length added
    if config is not None:
        return config
    args = getattr(model, "args", None)
    if args is not None and dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    raise ValueError("cannot tell the model's configuration: it was not loaded from a folder and has no mlx_lm args")


def sixteen_bit(array: mx.array) -> mx.array:
    """float16, except a bfloat16 model keeps bfloat16 (what CUDA Unsloth's merged_16bit writes)."""
    return array if array.dtype in (mx.float16, mx.bfloat16) else array.astype(mx.float16)


def check_merged_keywords(kwargs: Dict[str, Any]) -> None:
    unknown = sorted(name for name, value in kwargs.items() if name not in _INERT or (name == "push_to_hub" and value))
    if unknown:
        raise NotImplementedError(
            f"save_pretrained_merged on MLX does not support {', '.join(unknown)}; it writes a local folder only"
        )


def save_pretrained_merged(
    model: Any, save_directory: str | Path, tokenizer: Any = None, save_method: str = "merged_16bit", **kwargs: Any
) -> Path:
    """Write the merged model (or, for save_method="lora", the adapter) into `save_directory`; returns the folder."""
    check_merged_keywords(kwargs)
    method = normalised_name(save_method)
    if method not in SAVE_METHODS:
        raise NotImplementedError(
            f"save_method={save_method!r} is not available on MLX; choose one of {', '.join(SAVE_METHODS)}"
        )
    folder = Path(save_directory)
    if method == "lora":
        save_model_files(folder, model, tokenizer)
        return folder
    if method == "mxfp4":
        _refuse_mxfp4(model)
    weights = merged_weights(dequantized_copy(model))
    if method == "merged_4bit":
        print(f"Unsloth: {FOUR_BIT_NOTE}.")
        return _save_mlx_quantized(model, folder, tokenizer, weights, "affine")
    if method == "mxfp4":
        return _save_mlx_quantized(model, folder, tokenizer, weights, "mxfp4")
    if method == "merged_16bit":
        weights = {name: sixteen_bit(value) for name, value in weights.items()}
    config = {key: value for key, value in model_config(model).items() if key not in _QUANTIZATION_KEYS}
    config["torch_dtype"] = {mx.float16: "float16", mx.bfloat16: "bfloat16"}.get(
        next(iter(weights.values())).dtype, "float32"
    )
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def _refuse_mxfp4(model: Any) -> None:
    model_type = model_config(model).get("model_type")
    if model_type not in MXFP4_MODEL_TYPES:
        raise NotImplementedError(
            f"save_method='mxfp4' is for gpt-oss models ({', '.join(MXFP4_MODEL_TYPES)}), not {model_type!r}; "
            "use merged_16bit, or merged_4bit for MLX's 4-bit format"
        )


def _save_mlx_quantized(model: Any, folder: Path, tokenizer: Any, weights: Dict[str, mx.array], mode: str) -> Path:
    """The merged weights quantized as `mlx_lm.convert -q --q-mode MODE` does, saved with mlx_lm's own writers."""
    import importlib

    from mlx_lm.utils import quantize_model, save_config, save_model

    config = {key: value for key, value in model_config(model).items() if key not in _QUANTIZATION_KEYS}
    module = importlib.import_module(type(model).__module__)
    fresh = module.Model(module.ModelArgs.from_dict(config))
    if hasattr(fresh, "sanitize"):
        weights = fresh.sanitize(dict(weights))
    fresh.load_weights(list(weights.items()), strict=True)
    group_size, bits = (FOUR_BIT_GROUP_SIZE, 4) if mode == "affine" else (None, None)  # mlx_lm's mode defaults
    fresh, config = quantize_model(fresh, config, group_size=group_size, bits=bits, mode=mode)
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, fresh, donate_model=True)
    save_config(config, config_path=folder / "config.json")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def save_pretrained_gguf(
    model: Any,
    save_directory: str | Path,
    tokenizer: Any,
    quantization_method: Any = DEFAULT_QUANTIZATION_METHOD,
) -> Any:
    """Write `unsloth.<TYPE>.gguf` into `save_directory`: one path, or a list of paths for a list of methods."""
    requested = requested_methods(quantization_method)
    check_request(model_config(model), save_directory, requested)  # before the copy a refusal would waste
    model = dequantized_copy(model)
    paths = write_files(model_config(model), merged_weights(model), save_directory, tokenizer, requested)
    return paths if isinstance(quantization_method, (list, tuple)) else paths[0]
