# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Qwen 3 VL's projector (llama.cpp's `qwen3vl`): Qwen 2 VL's two-frame patch embedding, now with a bias and learned
positions resized to the image, LayerNorm blocks with a fused attention projection and a GELU feed-forward, the final
merger, and the deepstack mergers whose outputs the language model adds to its first layers; as
`Qwen3VLVisionModel` in llama.cpp's converter, which writes the same projector for Qwen 3 VL MoE and Qwen 3.5 (dense
and MoE, whose towers have no deepstack mergers)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from .qwen2vl import QwenVLProjector, patch_embedding
from ..registry import UnsupportedProjector, float32, register

_TOWER_PREFIX = "vision_tower."
_DEEPSTACK = "visual.deepstack_merger_list."
# The merger's parts as llama.cpp names them (its two layers numbered 0 and 2, as Qwen 2 VL's).
_MERGER = {"norm": "v.post_ln", "linear_fc1": "mm.0", "linear_fc2": "mm.2"}
_DEEPSTACK_PARTS = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}
# The tower's activation llama.cpp's qwen3vl graph runs (clip.use_gelu: the tanh approximation).
_ACTIVATION = "gelu_pytorch_tanh"


def _deepstack_indexes(vision: Dict[str, Any]) -> List[int]:
    return [int(index) for index in vision.get("deepstack_visual_indexes") or ()]


@register("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
class Qwen3VLProjector(QwenVLProjector):
    projector_type = "qwen3vl_merger"  # gguf.VisionProjectorType.QWEN3VL

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        act = config["vision_config"].get("hidden_act", _ACTIVATION)
        if act != _ACTIVATION:
            raise UnsupportedProjector(
                f"{config.get('model_type')} with vision hidden_act={act!r}: llama.cpp's qwen3vl runs {_ACTIVATION}"
            )

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        vision = dict(config["vision_config"])
        # As llama.cpp's converter: the side its learned position grid covers, Qwen's checkpoints naming no image size.
        side = math.isqrt(int(vision.get("num_position_embeddings") or 2304))
        vision["image_size"] = side * int(vision.get("patch_size") or 16)
        return vision

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        vision = config["vision_config"]
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, int(vision["depth"]))
        tensors: Dict[str, np.ndarray] = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIX):
                continue
            name = "visual." + name.removeprefix(_TOWER_PREFIX)  # llama.cpp's converter maps Hugging Face's names
            data = float32(value)
            if name.endswith("patch_embed.proj.weight"):
                tensors.update(patch_embedding(data))
            elif name.endswith("patch_embed.proj.bias"):
                tensors["v.patch_embd.bias"] = data
            elif name.startswith(("visual.merger.", _DEEPSTACK)):
                tensors[_merger_name(name, vision)] = data
            else:
                target = names.get_name(name, try_suffixes=(".weight", ".bias"))
                if target is None:
                    raise KeyError(f"no llama.cpp mmproj tensor for {config.get('model_type')}'s weight {name!r}")
                tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        super().write_keys(writer, config, preprocessor)
        vision = config["vision_config"]
        writer.add_vision_use_gelu(True)
        if "spatial_merge_size" in vision:
            writer.add_vision_spatial_merge_size(int(vision["spatial_merge_size"]))
        deepstack = set(_deepstack_indexes(vision))
        # Written for every block, all false in a tower without deepstack mergers (Qwen 3.5), as llama.cpp's converter.
        writer.add_vision_is_deepstack_layers([block in deepstack for block in range(int(vision["depth"]))])


def _merger_name(name: str, vision: Dict[str, Any]) -> str:
    """A merger's weight under llama.cpp's name; a deepstack merger is numbered by the tower block it reads."""
    part, suffix = _split_merger(name)
    if name.startswith(_DEEPSTACK):
        block = _deepstack_indexes(vision)[int(name.removeprefix(_DEEPSTACK).split(".")[0])]
        return f"v.deepstack.{block}.{_DEEPSTACK_PARTS[part]}.{suffix}"
    return f"{_MERGER[part]}.{suffix}"


def _split_merger(name: str) -> Tuple[str, str]:
    *_, part, suffix = name.split(".")
    if part not in _MERGER:
        raise KeyError(f"no llama.cpp mmproj tensor for a Qwen 3 VL merger's weight {name!r}")
    return part, suffix
