# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma 3n's vision projector (llama.cpp's `gemma3nv`): the MobileNet-V5 tower, its multi-scale fusion, then the
embedder's norms and projection into the language model; as `Gemma3nVisionAudioModel` in llama.cpp's converter.

llama.cpp's converter puts the audio conformer (`gemma3na`) into the same mmproj file, but the pinned one (0.3.36)
cannot write it for a real checkpoint (it has no name for the sub-sampling convolutions' norm weights) and libmtmd
skips Gemma 3n's audio tensors, so the file written here holds the vision half alone and the export says so.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..registry import ProjectorFamily, UnsupportedProjector, float32, register

_VISION_PREFIXES = ("vision_tower.", "embed_vision.")
_NOT_LANGUAGE = ("vision_tower.", "embed_vision.", "audio_tower.", "embed_audio.")
_BLOCKS = "model.vision_tower.timm_model.blocks."
# The MobileNet block tensors llama.cpp's converter renames itself (two block indices, which its name map lacks).
_BLOCK_SUFFIXES = frozenset(
    {
        *(f"{part}.weight" for part in ("conv_exp", "bn1", "conv_pwl", "bn2", "norm")),
        *(f"{part}.{layer}.weight" for part in ("dw_start", "dw_mid", "pw_exp", "pw_proj") for layer in ("conv", "bn")),
        *(f"attn.{part}.proj.weight" for part in ("query", "key", "value", "output")),
        *(f"attn.{part}.{layer}.weight" for part in ("key", "value") for layer in ("down_conv", "norm")),
        "layer_scale.gamma",
    }
)
# Vectors libmtmd's MobileNet graph multiplies into a (W, H, C) map, so stored as (1, C, 1, 1). llama.cpp 0.3.36's
# converter means to store the blocks' layer scales so too but renames them first and leaves them vectors, which its
# graph then cannot broadcast (a GGML_ASSERT in build_inverted_residual): here they take the shape the graph needs.
_BROADCAST = ("v.conv_stem.conv.bias", ".layer_scale.gamma")
# llama.cpp's converter's defaults for a MobileNet-V5 config, which names none of them.
_IMAGE_SIDE = 768
_IMAGE_TOKENS = 256
_HEADS = 8
_WIDTH = 2048
_FAKE_BLOCKS = 128  # its placeholder block count for a file with two encoders
AUDIO_LEFT_OUT = (
    "Gemma 3n's audio projector (gemma3na) is not written into the mmproj file: llama.cpp's converter "
    "(llama-cpp-python 0.3.36) cannot name its sub-sampling convolutions' norm weights and libmtmd does not run "
    "Gemma 3n's audio, so the mmproj holds the vision projector (gemma3nv) alone and llama.cpp reads images, not audio"
)


def _llama_cpp_name(name: str, names: Any) -> str:
    """mlx-vlm's weight name (Hugging Face's without `model.`) as llama.cpp's converter names it."""
    name = "model." + name
    if name.startswith(_BLOCKS):
        stage, block, suffix = name[len(_BLOCKS) :].split(".", 2)
        if suffix not in _BLOCK_SUFFIXES:
            raise KeyError(f"no llama.cpp mmproj tensor for Gemma 3n's weight {name!r}")
        return f"v.blk.{stage}.{block}.{suffix}"
    target = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if target is None:
        raise KeyError(f"no llama.cpp mmproj tensor for Gemma 3n's weight {name!r}")
    return target


@register("gemma3n")
class Gemma3nProjector(ProjectorFamily):
    projector_type = "gemma3nv"
    per_encoder_type = True

    # llama.cpp's converter keeps the stem's convolution in F32 whatever the file's type.
    forced_types = {"v.conv_stem.conv.weight": "F32"}

    def refuse(self, config: Dict[str, Any]) -> None:
        # libmtmd (clip.cpp) takes gemma3nv's output width from the projection's input side, the tower's width, and
        # refuses a language model of any other width.
        text = int(config["text_config"]["hidden_size"])
        tower = int(config["vision_config"].get("hidden_size") or _WIDTH)
        if text != tower:
            raise UnsupportedProjector(
                f"gemma3n with a language model {text} wide beside a vision tower {tower} wide: llama.cpp's libmtmd "
                f"(llama-cpp-python 0.3.36) reads gemma3nv's output width as the tower's ({tower}) and refuses to load "
                "the pair"
            )

    def common_settings(
        self, config: Dict[str, Any], preprocessor: Dict[str, Any]
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        vision = dict(config["vision_config"])
        side = int((preprocessor.get("size") or {}).get("height") or _IMAGE_SIDE)
        # MobileNet-V5 takes the pixels in [0, 1]: llama.cpp's converter writes no normalisation whatever the file says.
        unnormalised = {**preprocessor, "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0]}
        return {
            **vision,
            "image_size": side,
            # llama.cpp's converter divides the side by the token count; its loader reads neither for this tower.
            "patch_size": side // int(preprocessor.get("image_seq_length") or _IMAGE_TOKENS),
            "hidden_size": int(vision.get("hidden_size") or _WIDTH),
            "intermediate_size": 4 * int(vision.get("intermediate_size") or _WIDTH),
            "num_attention_heads": int(vision.get("num_attention_heads") or _HEADS),
            "num_hidden_layers": _FAKE_BLOCKS,
        }, unnormalised

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text = {"vocab_size": config.get("vocab_size"), **config["text_config"], "model_type": "gemma3n_text"}
        named = {
            name.removeprefix("language_model."): value
            for name, value in weights.items()
            if not name.startswith(_NOT_LANGUAGE)
        }
        return text, named

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        if config.get("audio_config"):
            warnings.warn(AUDIO_LEFT_OUT, stacklevel=2)
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, _FAKE_BLOCKS)
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_VISION_PREFIXES):
                continue
            target = _llama_cpp_name(name, names)
            data = float32(value)
            if data.ndim == 4:
                data = data.transpose(0, 3, 1, 2)  # MLX's (out, h, w, in) convolution to llama.cpp's (out, in, h, w)
            if target.endswith(_BROADCAST):
                data = data.reshape(1, -1, 1, 1)
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        writer.add_vision_attention_layernorm_eps(float(config["vision_config"].get("layer_norm_eps", 1e-6)))
