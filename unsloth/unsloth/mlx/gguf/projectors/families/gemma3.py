# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma 3's projector (llama.cpp's `gemma3`): a SigLIP tower, its patches average-pooled to `mm_tokens_per_image`,
an RMS norm and one projection into the language model's width; as `Gemma3VisionModel` in llama.cpp's converter."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..registry import ProjectorFamily, float32, register

_TOWER_PREFIXES = ("vision_tower.", "multi_modal_projector.")
# llama.cpp reads this many patches per side pooled into one token unless the file says otherwise.
_DEFAULT_POOLING = 4


def _text_config(config: Dict[str, Any]) -> Dict[str, Any]:
    text = {"vocab_size": config.get("vocab_size"), **config["text_config"], "model_type": "gemma3_text"}
    # mlx-vlm's Gemma 3 rotates its global layers by rope_global_base_freq, whatever rope_theta says.
    if text.get("rope_global_base_freq"):
        text["rope_theta"] = text["rope_global_base_freq"]
    return text


def _pooling(config: Dict[str, Any]) -> int:
    vision = config["vision_config"]
    tokens = int(config["text_config"].get("mm_tokens_per_image") or config.get("mm_tokens_per_image") or 256)
    return (int(vision["image_size"]) // int(vision["patch_size"])) // math.isqrt(tokens)


@register("gemma3")
class Gemma3Projector(ProjectorFamily):
    projector_type = "gemma3"
    # llama.cpp issue 13025: the projection stays F16, the patch and position embeddings F32.
    forced_types = {"mm.input_projection.weight": "F16", "v.patch_embd.weight": "F32", "v.position_embd.weight": "F32"}

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        named = {
            name.removeprefix("language_model."): value
            for name, value in weights.items()
            if name.startswith("language_model.")
        }
        return _text_config(config), named

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, int(config["vision_config"]["num_hidden_layers"]))
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            name = name.replace("_weight", ".weight")  # the projection is a bare parameter, not a layer
            data = float32(value)
            if name.endswith("patch_embedding.weight"):
                data = data.transpose(0, 3, 1, 2)  # MLX's (out, h, w, in) convolution to llama.cpp's (out, in, h, w)
            if name.endswith("soft_emb_norm.weight"):
                data = data + np.float32(1.0)  # Gemma's RMS norm scales by 1 + weight, llama.cpp's by the weight
            target = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for Gemma 3's weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        vision = config["vision_config"]
        writer.add_vision_attention_layernorm_eps(float(vision.get("layer_norm_eps") or 1e-6))
        writer.add_vision_use_gelu(True)
        pooling = _pooling(config)
        if pooling > 0 and pooling != _DEFAULT_POOLING:
            writer.add_vision_projector_scale_factor(pooling)
