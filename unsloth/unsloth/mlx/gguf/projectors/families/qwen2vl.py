# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Qwen 2 VL's and Qwen 2.5 VL's projector (llama.cpp's `qwen2vl` / `qwen25vl`): a ViT over 14-pixel patches of two
frames (one image is both), 2-D rotary attention, windowed in Qwen 2.5 but for its full-attention blocks, then a norm
and a two-layer merger of each 2x2 patch square into one token; as `Qwen2VLVisionModel` in llama.cpp's converter."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np

from ...families import unwrap_text_model
from ..registry import ProjectorFamily, UnsupportedProjector, float32, refuse_patch_grid, register

_TOWER_PREFIX = "vision_tower."
# What llama.cpp's converter writes for Qwen's checkpoints, which name no image size (the tower takes any; mlx-vlm
# fills in a default of its own).
_IMAGE_SIZE = 560
# llama.cpp's qwen25vl graph windows by this many pixels, whatever the file says.
_WINDOW_SIZE = 112
# llama.cpp's graph merges this many patches a side into one token, and splits the patch embedding in this many frames.
_MERGE, _FRAMES = 2, 2


def patch_embedding(data: np.ndarray) -> Iterator[Tuple[str, np.ndarray]]:
    """MLX's Conv3d (out, time, h, w, in) as llama.cpp's one Conv2d (out, in, h, w) per frame."""
    yield "v.patch_embd.weight", data[:, 0].transpose(0, 3, 1, 2)
    yield "v.patch_embd.weight.1", data[:, 1].transpose(0, 3, 1, 2)


def _attention(name: str, data: np.ndarray) -> Iterator[Tuple[str, np.ndarray]]:
    """The fused query, key and value rows as three tensors, named as llama.cpp's converter names them."""
    for part, rows in zip("qkv", np.split(data, 3, axis=0)):
        yield name.replace(".qkv.", f".{part}."), rows


class QwenVLProjector(ProjectorFamily):
    """What Qwen 2 VL and Qwen 2.5 VL share; each names its projector type, refusals and keys."""

    def refuse(self, config: Dict[str, Any]) -> None:
        refuse_patch_grid(config, "qwen2vl", _FRAMES, _MERGE)

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text, named = unwrap_text_model(config, weights)
        return text, {name: value for name, value in named.items() if not name.startswith(_TOWER_PREFIX)}

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        vision = dict(config["vision_config"])
        vision["image_size"] = _IMAGE_SIZE
        if "embed_dim" in vision:  # Qwen 2 VL: llama.cpp reads embed_dim as the width, hidden_size as the FFN's
            vision["intermediate_size"], vision["hidden_size"] = vision["hidden_size"], vision["embed_dim"]
        return vision

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        # The merger's two layers are numbered as blocks are: the map must reach block 2.
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(int(config["vision_config"]["depth"]), 3))
        tensors: Dict[str, np.ndarray] = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIX):
                continue
            name = "visual." + name.removeprefix(_TOWER_PREFIX)  # llama.cpp's converter maps Hugging Face's names
            data = float32(value)
            if name.endswith("patch_embed.proj.weight"):
                tensors.update(patch_embedding(data))
                continue
            for part, rows in _attention(name, data) if ".attn.qkv." in name else [(name, data)]:
                target = names.get_name(part, try_suffixes=(".weight", ".bias"))
                if target is None:
                    raise KeyError(f"no llama.cpp mmproj tensor for {config.get('model_type')}'s weight {name!r}")
                tensors[target] = rows
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        # llama.cpp's converter writes the language model's epsilon for the tower's norms.
        text = {**config, **(config.get("text_config") or {})}
        writer.add_vision_attention_layernorm_eps(float(text.get("rms_norm_eps") or 1e-6))


@register("qwen2_vl")
class Qwen2VLProjector(QwenVLProjector):
    projector_type = "qwen2vl_merger"  # gguf.VisionProjectorType.QWEN2VL

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        act = config["vision_config"].get("hidden_act", "quick_gelu")
        if act != "quick_gelu":  # llama.cpp's qwen2vl graph runs quick GELU when the file names no other
            raise UnsupportedProjector(f"qwen2_vl with vision hidden_act={act!r}: llama.cpp's qwen2vl runs quick_gelu")


@register("qwen2_5_vl")
class Qwen25VLProjector(QwenVLProjector):
    projector_type = "qwen2.5vl_merger"  # gguf.VisionProjectorType.QWEN25VL

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        vision = config["vision_config"]
        if int(vision.get("window_size", _WINDOW_SIZE)) != _WINDOW_SIZE:
            raise UnsupportedProjector(
                f"qwen2_5_vl with window_size={vision['window_size']}: llama.cpp's qwen25vl graph windows by "
                f"{_WINDOW_SIZE} pixels"
            )
        _full_attention_pattern(vision)
        act = vision.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedProjector(f"qwen2_5_vl with vision hidden_act={act!r}: llama.cpp's qwen25vl runs silu")

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        super().write_keys(writer, config, preprocessor)
        writer.add_vision_use_silu(True)
        writer.add_vision_n_wa_pattern(_full_attention_pattern(config["vision_config"]))


def _full_attention_pattern(vision: Dict[str, Any]) -> int:
    """Every how many blocks one attends fully, as llama.cpp reads it; blocks not evenly spaced are refused."""
    indexes: List[int] = [int(index) for index in vision.get("fullatt_block_indexes") or ()]
    every = indexes[0] + 1 if indexes else 0
    if not indexes or any(index != (position + 1) * every - 1 for position, index in enumerate(indexes)):
        raise UnsupportedProjector(
            f"qwen2_5_vl with fullatt_block_indexes={indexes}: llama.cpp's qwen25vl graph attends fully in every "
            "n-th block only, n the first index plus one"
        )
    return every
