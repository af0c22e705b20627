# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Llama 4's projector (llama.cpp's `llama4`): a linear patch embedding of 14 x 14 pixels, a class token and learned
positions, LayerNorm blocks with 2-D rotary attention, the patches pixel-shuffled 2 x 2 into one, a two-layer GELU
adapter and one projection into the language model; as `Llama4VisionModel` in llama.cpp's converter. The language
model is llama.cpp's `llama4`, written by the text converter from the config mlx-vlm ran.

Refused for now (`llama_cpp_differs`): the pinned llama.cpp runs the file otherwise than MLX runs the model, as
tests/mlx_api/with_llama_cpp/test_gguf_mmproj_untrained_llama_cpp.py measures; the file is written as llama.cpp's
converter writes it (but for the block norm it misnames), ready for a llama.cpp that reads it as MLX does."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ...families import unwrap_text_model
from ..llama_cpp_projectors import LLAMA_CPP_PYTHON
from ..registry import ProjectorFamily, UnsupportedProjector, float32, register

_TOWER_PREFIXES = ("vision_model.", "multi_modal_projector.")
_LANGUAGE_PREFIX = "language_model."
# What llama.cpp's llama4 graph fixes, and what mlx-vlm's tower runs whatever its config says.
_ROPE_BASE = 10000.0
_NORM_EPS = 1e-5
_ACTIVATION = "gelu"
# llama.cpp's converter maps Hugging Face's per-block norm before the feed-forward to Gemma 4's `attn_post_norm` (its
# tensor map gives the name to both); libmtmd's llama4 graph reads that block's norm as `ln2`, so it is written so.
_PRE_FFN_NORM = "post_attention_layernorm"


def _mlx_vlm_text(text: Dict[str, Any]) -> Dict[str, Any]:
    """The language model's config as mlx-vlm ran it: its TextConfig's defaults where the config names none."""
    import importlib

    settings = importlib.import_module("mlx_vlm.models.llama4.config").TextConfig
    defaults = {
        field.name: field.default
        for field in dataclasses.fields(settings)
        if field.default is not dataclasses.MISSING and field.default is not None
    }
    return {**defaults, **text}


@register("llama4")
class Llama4Projector(ProjectorFamily):
    projector_type = "llama4"
    llama_cpp_differs = (
        f"llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON}) runs its llama4 projector without the pixel shuffle's last "
        "transpose, so the language model would read each image's tokens in transposed grid order (a tiny model's "
        "image embeddings 1.3 of the largest apart from MLX's, 2.3e-2 once transposed back), and libmtmd leaves out "
        "the image token the processor writes between an image's start marker and its patches; mlx-vlm's tower "
        "also runs GELU as x*sigmoid(1.702x), llama.cpp's as GELU (most of that 2.3e-2)"
    )

    def refuse(self, config: Dict[str, Any]) -> None:
        vision = config.get("vision_config") or {}
        if float(vision.get("rope_theta", _ROPE_BASE)) != _ROPE_BASE:
            raise UnsupportedProjector(
                f"llama4 with a vision rope_theta of {vision['rope_theta']}: llama.cpp's llama4 rotates by {_ROPE_BASE}"
            )
        if float(vision.get("norm_eps", _NORM_EPS)) != _NORM_EPS:
            raise UnsupportedProjector(
                f"llama4 with a vision norm_eps of {vision['norm_eps']}: mlx-vlm's tower norms with {_NORM_EPS} "
                "whatever the config says, and llama.cpp would read the config's"
            )
        act = vision.get("hidden_act", _ACTIVATION)
        if act != _ACTIVATION:
            raise UnsupportedProjector(f"llama4 with vision hidden_act={act!r}: llama.cpp's llama4 runs {_ACTIVATION}")
        ratio = float(vision.get("pixel_shuffle_ratio", 0.5))
        if ratio != 0.5:  # mlx-vlm's processor counts image tokens by 0.5 whatever the config says
            raise UnsupportedProjector(
                f"llama4 with pixel_shuffle_ratio={ratio}: mlx-vlm's processor writes the image tokens of 0.5"
            )

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        outer = {**config, "text_config": _mlx_vlm_text(config["text_config"])}
        language = {name: value for name, value in weights.items() if name.startswith(_LANGUAGE_PREFIX)}
        return unwrap_text_model(outer, language)

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        layers = int(config["vision_config"]["num_hidden_layers"])
        # The adapter's fc1 and fc2 are numbered as blocks are: the map must reach block 2.
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(layers, 3))
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            data = float32(value)
            if name.startswith("multi_modal_projector.linear_1."):
                # One linear layer, whatever its numbered name, as llama.cpp's converter writes it.
                tensors[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.V_MMPROJ_FC] + ".weight"] = data
                continue
            if name.endswith("positional_embedding_vlm"):
                name += ".weight"  # a bare parameter, not a layer
            if f".{_PRE_FFN_NORM}." in name:
                block, kind = name.split(".")[3], name.rsplit(".", 1)[1]
                tensors[f"v.blk.{block}.ln2.{kind}"] = data
                continue
            target = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for Llama 4's weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        vision = config["vision_config"]
        writer.add_vision_attention_layernorm_eps(float(vision.get("norm_eps", _NORM_EPS)))
        writer.add_vision_projector_scale_factor(int(1.0 / float(vision.get("pixel_shuffle_ratio", 0.5))))
        writer.add_vision_use_gelu(True)
