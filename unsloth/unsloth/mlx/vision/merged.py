# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`save_pretrained_merged` for a vision model on MLX: LoRA folded into the base weights, written as a model folder
mlx-vlm loads (config, safetensors, processor files); the trained model keeps its adapters. `merged_4bit` writes
MLX's 4-bit format as `mlx_vlm.convert -q` does (the language model quantized, the towers in floating point)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..models.keywords import normalised_name
from ..models.merged import FOUR_BIT_GROUP_SIZE, MXFP4_MODEL_TYPES
from ..models.quantize import dense_layer
from .backend import quantize_saved_model
from .processors import save_processor
from .lora import vision_lora_settings

MERGED_METHODS = ("merged_16bit", "merged_32bit", "merged_4bit")
FOUR_BIT_NOTE = (
    "save_method='merged_4bit' on MLX writes MLX's 4-bit format (mlx_vlm.convert -q: the language model in groups "
    "of 64, the vision tower in floating point), which mlx-vlm loads; it is not bitsandbytes' 4-bit format, which "
    "CUDA Unsloth writes"
)
SOURCE_FOLDER_ATTRIBUTE = "unsloth_source_folder"
SOURCE_FILES = ("config.json", "preprocessor_config.json", "processor_config.json", "generation_config.json")


def merged_weights(model: Any) -> Dict[str, Any]:
    """Every weight with LoRA folded in and quantized layers back in floating point; the model is left as it is."""
    weights = dict(tree_flatten(model.parameters()))
    settings = vision_lora_settings(model)
    replaced = {
        path: module.fuse(dequantize=True)
        for path, module in model.named_modules()
        if path in set(settings.paths if settings else ())
    }
    for path, module in model.named_modules():
        inside_lora = any(path == done or path.startswith(done + ".") for done in replaced)
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)) and not inside_lora:
            replaced[path] = dense_layer(module)
    for path, module in replaced.items():
        weights = {name: value for name, value in weights.items() if not name.startswith(path + ".")}
        weights.update({f"{path}.{name}": value for name, value in tree_flatten(module.parameters())})
    return weights


def save_vision_merged(
    model: Any, save_directory: str | Path, tokenizer: Any = None, save_method: str = "merged_16bit", **_: Any
) -> Path:
    method = normalised_name(save_method)
    if method == "mxfp4":
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        raise NotImplementedError(
            f"save_method='mxfp4' is for gpt-oss models ({', '.join(MXFP4_MODEL_TYPES)}), not {model_type!r}; "
            "use merged_16bit, or merged_4bit for MLX's 4-bit format"
        )
    if method not in MERGED_METHODS:
        raise NotImplementedError(
            f"save_method={save_method!r} is not available for vision models on MLX; use one of "
            f"{', '.join(MERGED_METHODS)} or lora"
        )
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    weights = merged_weights(model)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    source = Path(getattr(model, SOURCE_FOLDER_ATTRIBUTE))
    for name in SOURCE_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, folder / name)
    if tokenizer is not None:
        save_processor(tokenizer, folder)
    if method == "merged_4bit":
        print(f"Unsloth: {FOUR_BIT_NOTE}.")
        quantize_saved_model(folder, bits=4, group_size=FOUR_BIT_GROUP_SIZE)
    return folder
