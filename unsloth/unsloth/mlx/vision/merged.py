# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`save_pretrained_merged` for a vision model on MLX: LoRA folded into the base weights, written as a model folder
mlx-vlm loads (config, safetensors, processor files); the trained model keeps its adapters. `merged_4bit` writes
MLX's 4-bit format as `mlx_vlm.convert -q` does (the language model quantized, the towers in floating point).
`save_vision_gguf` hands the same merged weights and the config to the `gguf` layer: the language model's GGUF and
the projector's mmproj."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..gguf.export import DEFAULT_QUANTIZATION_METHOD, requested_methods
from ..gguf.projectors.multimodal import OLLAMA_NOTE, check_multimodal_request, write_multimodal_files
from ..models.keywords import normalised_name
from ..models.merged import FOUR_BIT_GROUP_SIZE, MXFP4_MODEL_TYPES
from ..models.quantize import dense_layer
from .backend import effective_config, quantize_saved_model
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


def _source_json(model: Any, name: str) -> Dict[str, Any]:
    path = Path(getattr(model, SOURCE_FOLDER_ATTRIBUTE)) / name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _image_settings(model: Any, processor: Any) -> Dict[str, Any]:
    """The image processor's settings (mean, std), as llama.cpp's converter reads them from the checkpoint."""
    image_processor = getattr(processor, "image_processor", None)
    settings = {**_source_json(model, "preprocessor_config.json")}
    for key in ("image_mean", "image_std"):
        if getattr(image_processor, key, None) is not None:
            settings[key] = list(getattr(image_processor, key))
    if getattr(image_processor, "do_normalize", True) is False:  # the tower sees the pixels in [0, 1] as they are
        settings |= {"image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}
    return settings


def save_vision_gguf(
    model: Any,
    save_directory: str | Path,
    tokenizer: Any = None,
    quantization_method: Any = DEFAULT_QUANTIZATION_METHOD,
) -> List[Path]:
    """`unsloth.<TYPE>.gguf` per requested method, then `unsloth.<F16|BF16>-mmproj.gguf`, as CUDA Unsloth writes a
    vision model's GGUF; the paths in that order."""
    if tokenizer is None:
        raise TypeError("save_pretrained_gguf of a vision model needs its processor (or tokenizer) as the 2nd argument")
    requested = requested_methods(quantization_method)
    config = effective_config(model, _source_json(model, "config.json"))
    check_multimodal_request(config, save_directory, requested)  # before the merge a refusal would waste
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    paths = write_multimodal_files(
        config, merged_weights(model), _image_settings(model, tokenizer), save_directory, text_tokenizer, requested
    )
    if text_tokenizer is not tokenizer:
        save_processor(tokenizer, Path(save_directory))
    print(f"Unsloth: example usage for Multimodal LLMs: llama-mtmd-cli -m {paths[0]} --mmproj {paths[-1]}")
    print("Unsloth: load image inside llama.cpp runner: /image test_image.jpg")
    print("Unsloth: Prompt model to describe the image")
    print(f"Unsloth: {OLLAMA_NOTE}.")
    return paths
