# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""GLM-4.1V's projector (llama.cpp's `glm4v`): Qwen 2 VL's two-frame patch embedding with a bias, an RMS norm and
learned positions, RMS-normed blocks with a fused attention projection, 2-D rotary positions and a SwiGLU feed-forward,
then a 2 x 2 convolution merging patches, a projection with LayerNorm and GELU, and a SwiGLU merger; as
`Glm4VVisionModel` in llama.cpp's converter, which writes the same projector for GLM-4.5V (`glm4v_moe`) and GLM-OCR
(`glm_ocr`: no learned positions or norm after the patch embedding, biases and per-head query and key norms)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ...families import unwrap_text_model
from ..registry import ProjectorFamily, UnsupportedProjector, float32, refuse_patch_grid, register
from .qwen2vl import patch_embedding

_TOWER_PREFIX = "vision_tower."
# llama.cpp's glm4v graph merges 2 x 2 patches and splits the patch embedding in 2 frames, whatever the file says.
_MERGE, _FRAMES = 2, 2
# mlx-vlm's tower and merger run SwiGLU with SiLU whatever `hidden_act` says; llama.cpp reads the activation from it.
_ACTIVATION = "silu"
# llama.cpp's converter's defaults where the config names none.
_EPSILON, _POSITIONS, _PATCH = 1e-5, 2304, 16


@register("glm4v", "glm4v_moe", "glm_ocr")
class Glm4VProjector(ProjectorFamily):
    projector_type = "glm4v"  # gguf.VisionProjectorType.GLM4V

    def refuse(self, config: Dict[str, Any]) -> None:
        refuse_patch_grid(config, "glm4v", _FRAMES, _MERGE)
        vision, model_type = config["vision_config"], config.get("model_type")
        act = vision.get("hidden_act", _ACTIVATION)
        if act != _ACTIVATION:
            raise UnsupportedProjector(
                f"{model_type} with vision hidden_act={act!r}: mlx-vlm's tower runs SiLU whatever it says, "
                "llama.cpp's glm4v the activation it names"
            )

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text, named = unwrap_text_model(config, weights)
        return text, {name: value for name, value in named.items() if not name.startswith(_TOWER_PREFIX)}

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        vision = dict(config["vision_config"])
        if "image_size" not in vision:  # as llama.cpp's converter: the side its learned position grid covers
            side = math.isqrt(int(vision.get("num_position_embeddings") or _POSITIONS))
            vision["image_size"] = side * int(vision.get("patch_size") or _PATCH)
        return vision

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, int(config["vision_config"]["depth"]))
        tensors: Dict[str, np.ndarray] = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIX):
                continue
            name = "visual." + name.removeprefix(_TOWER_PREFIX)  # llama.cpp's converter maps Hugging Face's names
            data = float32(value)
            if name == "visual.patch_embed.proj.weight":
                tensors.update(patch_embedding(data))
                continue
            if name == "visual.patch_embed.proj.bias":
                tensors["v.patch_embd.bias"] = data
                continue
            if name == "visual.downsample.weight":
                data = data.transpose(0, 3, 1, 2)  # MLX's Conv2d (out, h, w, in) as llama.cpp's (out, in, h, w)
            target = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for {config.get('model_type')}'s weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        writer.add_vision_use_silu(True)
        # One epsilon for every norm of the tower, the vision config's (mlx-vlm's blocks use 1e-6 whatever it says).
        writer.add_vision_attention_layernorm_eps(float(config["vision_config"].get("rms_norm_eps") or _EPSILON))
