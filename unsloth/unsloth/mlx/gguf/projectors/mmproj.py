# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""One `mmproj` GGUF file: the `clip.*` keys every projector shares (`MmprojModel.set_gguf_parameters` in llama.cpp's
converter), the family's own keys, and each tensor in the type llama.cpp's converter would store it in."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import numpy as np

from ..convert import write_tensors
from .registry import ProjectorFamily

# The projector's file types CUDA Unsloth writes: the model's own 16-bit type (llama.cpp's --outtype).
FILE_TYPES = {"f16": ("F16", "MOSTLY_F16"), "bf16": ("BF16", "MOSTLY_BF16")}
_POSITION_EMBEDDINGS = ("v.position_embd.weight", "a.position_embd.weight")


def stored_type(name: str, data: np.ndarray, family: ProjectorFamily, wanted: str) -> str:
    """Vectors and norms stay F32; the family's forced types next; the patch embedding in F16 only in an F16 file;
    biases and position embeddings F32; every other matrix in `wanted`."""
    if data.ndim <= 1 or name.endswith("_norm.weight"):
        return "F32"
    if name in family.forced_types:
        return family.forced_types[name]
    # Forced by substring before the ending is read, so Qwen VL's second frame (`.weight.1`) is a patch embedding too.
    if ".patch_embd.weight" in name or ".patch_merger.weight" in name:
        return "F16" if wanted == "F16" else "F32"
    if name in _POSITION_EMBEDDINGS or not name.endswith(".weight"):
        return "F32"
    return wanted


def _vision_value(vision: Dict[str, Any], *keys: str) -> Any:
    found = next((key for key in keys if key in vision), None)
    if found is None:
        raise KeyError(f"the vision config has none of {keys}")
    return vision[found]


def write_common_keys(
    writer: Any, config: Dict[str, Any], vision: Dict[str, Any], preprocessor: Dict[str, Any]
) -> None:
    """The vision encoder's shape and the image normalisation, as every projector's file carries them."""
    text = {**config, **(config.get("text_config") or {})}
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(int(text["hidden_size"]))
    writer.add_vision_image_size(int(vision["image_size"]))
    writer.add_vision_patch_size(int(vision["patch_size"]))
    writer.add_vision_embedding_length(int(_vision_value(vision, "hidden_size", "width")))
    writer.add_vision_feed_forward_length(int(_vision_value(vision, "intermediate_size")))
    writer.add_vision_block_count(int(_vision_value(vision, "num_hidden_layers", "depth")))
    writer.add_vision_head_count(int(_vision_value(vision, "num_attention_heads", "num_heads")))
    writer.add_vision_image_mean([float(value) for value in preprocessor["image_mean"]])
    writer.add_vision_image_std([float(value) for value in preprocessor["image_std"]])


def write_mmproj(
    path: Path,
    family: ProjectorFamily,
    config: Dict[str, Any],
    weights: Dict[str, Any],
    preprocessor: Dict[str, Any],
    file_type: str = "f16",
    name: str = "unsloth",
) -> Dict[str, str]:
    """Write the projector's GGUF (beside the saved tokenizer); returns each tensor's stored type."""
    import gguf

    wanted, llama_type = FILE_TYPES[file_type]
    tensors = family.tensors(config, weights, path.parent)
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType[llama_type])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    vision, preprocessor = family.common_settings(config, preprocessor)
    write_common_keys(writer, config, vision, preprocessor)
    if family.per_encoder_type:
        writer.add_clip_vision_projector_type(family.projector_type)
    else:
        writer.add_clip_projector_type(family.projector_type)
    family.write_keys(writer, config, preprocessor)
    return write_tensors(writer, tensors, lambda tensor_name, data: stored_type(tensor_name, data, family, wanted))
