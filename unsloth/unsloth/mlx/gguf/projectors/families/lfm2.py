# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""LFM2-VL's projector (llama.cpp's `lfm2`): a SigLIP 2 tower whose patch embedding is a linear layer, its patches
unshuffled by `downsample_factor`, then a layer norm and a two-layer projection; as `LFM2VLModel` in llama.cpp's
converter."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..registry import ProjectorFamily, float32, register

_TOWER_PREFIXES = ("vision_tower.", "multi_modal_projector.")
# llama.cpp's converter writes this size for a tower of dynamic resolution; its loader reads the patch grid itself.
_IMAGE_SIZE = 256
# llama.cpp's converter reshapes the patch embedding as 16 x 16 pixels, whatever the config says.
_PATCH = 16


def _layers_used(config: Dict[str, Any]) -> int:
    """The tower's layers up to `vision_feature_layer` (Python's index: -1 is the last), the ones llama.cpp runs."""
    dropped = -(int(config.get("vision_feature_layer", -1)) + 1)
    return int(config["vision_config"]["num_hidden_layers"]) - dropped


@register("lfm2_vl")
class Lfm2Projector(ProjectorFamily):
    projector_type = "lfm2"

    def refuse(self, config: Dict[str, Any]) -> None:
        from ..registry import UnsupportedProjector

        if int(config["vision_config"].get("patch_size") or _PATCH) != _PATCH:
            raise UnsupportedProjector(f"lfm2_vl with patch_size other than {_PATCH}: llama.cpp's converter fixes it")

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        vision = dict(config["vision_config"])
        return {**vision, "image_size": _IMAGE_SIZE, "num_hidden_layers": _layers_used(config)}

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text = {"vocab_size": config.get("vocab_size"), **config["text_config"], "model_type": "lfm2"}
        named = {
            name.removeprefix("language_model."): value
            for name, value in weights.items()
            if name.startswith("language_model.")
        }
        return text, named

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        layers = int(config["vision_config"]["num_hidden_layers"])
        # The projection's linear_1 and linear_2 are numbered as blocks are: the map must reach block 2.
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(layers, 3))
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            name = name.replace("vision_tower.", "vision_tower.vision_model.", 1)  # Hugging Face's extra level
            data = float32(value)
            if name.endswith("patch_embedding.weight"):
                data = data.reshape(data.shape[0], _PATCH, _PATCH, 3).transpose(0, 3, 1, 2)
            target = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for LFM2-VL's weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        writer.add_vision_attention_layernorm_eps(float(config["vision_config"]["layer_norm_eps"]))
        writer.add_vision_projector_scale_factor(int(config.get("downsample_factor", 2)))
        writer.add_vision_use_gelu(True)
