# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma 4's vision projector (llama.cpp's `gemma4v`): a tower of Gemma-style blocks over linear patch embeddings with a
2-D position table, pooled, then one projection into the language model; as `Gemma4VisionAudioModel` in llama.cpp's
converter. A checkpoint with an audio tower is refused: its `gemma4a` half is not written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ...families import unwrap_text_model
from ..registry import ProjectorFamily, UnsupportedProjector, float32, register

_TOWER_PREFIXES = ("vision_tower.", "embed_vision.")
_NOT_LANGUAGE = ("vision_tower.", "embed_vision.", "audio_tower.", "embed_audio.")
# llama.cpp's converter writes this size for a tower of variable resolution; its loader reads the patch grid itself.
_IMAGE_SIZE = 224
_SUFFIXES = (".weight", ".bias", ".input_max", ".input_min", ".output_max", ".output_min")


def _llama_cpp_name(name: str) -> str:
    """mlx-vlm's weight name spelled as llama.cpp's converter renames Hugging Face's before its name map."""
    name = "model." + name
    name = name.replace("model.vision_tower.encoder.", "vision_model.model.").replace(".linear.weight", ".weight")
    if name.endswith(("layer_scalar", "position_embedding_table")):
        name += ".weight"
    return name


@register("gemma4")
class Gemma4Projector(ProjectorFamily):
    projector_type = "gemma4v"
    per_encoder_type = True
    forced_types = {"v.position_embd.weight": "F32"}

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("audio_config"):
            raise UnsupportedProjector(
                "gemma4 with an audio tower: its audio projector (gemma4a), written in the same mmproj file, is not "
                "written here yet"
            )

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {**config["vision_config"], "image_size": _IMAGE_SIZE}

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text, named = unwrap_text_model(config, weights)
        return text, {name: value for name, value in named.items() if not name.startswith(_NOT_LANGUAGE)}

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, int(config["vision_config"]["num_hidden_layers"]))
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            name = _llama_cpp_name(name)
            data = float32(value).reshape(-1) if np.ndim(value) == 0 else float32(value)
            if name.endswith("patch_embedder.input_proj.weight"):
                patch = int((data.shape[1] // 3) ** 0.5)
                data = data.reshape(data.shape[0], patch, patch, 3).transpose(0, 3, 1, 2)
            target = names.get_name(name, try_suffixes=_SUFFIXES)
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for Gemma 4's weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        writer.add_vision_attention_layernorm_eps(float(config["vision_config"].get("layer_norm_eps") or 1e-6))
