# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Mistral 3's and Pixtral's projector (llama.cpp's `pixtral`): a Pixtral tower with 2-D rotary attention, then
(Mistral 3) a norm and a patch merger, and a two-layer projection, plus the [IMG_BREAK] token's embedding that ends
each image row; as `LlavaVisionModel` in llama.cpp's converter, which takes a `llava` config only with Pixtral's
tower (the Hub's Pixtral checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ...convert import interleave_rotary_rows
from ...families import unwrap_text_model
from ..registry import ProjectorFamily, UnsupportedProjector, float32, register

_TOWER_PREFIXES = ("vision_tower.", "multi_modal_projector.")
_LANGUAGE_PREFIX = "language_model."
_EMBEDDINGS = _LANGUAGE_PREFIX + "model.embed_tokens.weight"
# llama.cpp's Pixtral graph rotates its patches with this base, whatever the config says.
_ROPE_BASE = 10000.0
_BREAK_TOKEN = "[IMG_BREAK]"


def _token_id(folder: Path, token: str) -> int:
    """The token's id in the saved tokenizer, where llama.cpp's converter looks it up."""
    config = folder / "tokenizer_config.json"
    if config.is_file():
        decoder = json.loads(config.read_text(encoding="utf-8")).get("added_tokens_decoder") or {}
        for found, entry in decoder.items():
            if entry.get("content") == token:
                return int(found)
    for entry in json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens", []):
        if entry["content"] == token:
            return int(entry["id"])
    raise UnsupportedProjector(f"the tokenizer has no {token} token, which llama.cpp's Pixtral reads")


@register("mistral3")
class PixtralProjector(ProjectorFamily):
    projector_type = "pixtral"

    def refuse(self, config: Dict[str, Any]) -> None:
        vision, model_type = config["vision_config"], config.get("model_type")
        if float(vision.get("rope_theta") or _ROPE_BASE) != _ROPE_BASE:
            raise UnsupportedProjector(
                f"{model_type} with a vision rope_theta of {vision['rope_theta']}: llama.cpp's Pixtral rotates by "
                f"{_ROPE_BASE}"
            )
        act = vision.get("hidden_act", "gelu")  # transformers' default for a Pixtral tower
        if act != "silu":
            raise UnsupportedProjector(
                f"{model_type} with vision hidden_act={act!r}: mlx-vlm's Pixtral tower gates its feed-forward by SiLU "
                "whatever the config says, and llama.cpp would run the config's activation"
            )

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text, named = unwrap_text_model(config, weights)
        return text, {name: value for name, value in named.items() if not name.startswith(_TOWER_PREFIXES)}

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        vision = config["vision_config"]
        heads = int(vision["num_attention_heads"])
        # The projection's linear_1 and linear_2 are numbered as blocks are: the map must reach block 2.
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(int(vision["num_hidden_layers"]), 3))
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            name = name.replace("vision_tower.vision_model.", "vision_tower.")  # mlx-vlm's extra level
            data = float32(value)
            if name.endswith("patch_conv.weight"):
                data = data.transpose(0, 3, 1, 2)  # MLX's (out, h, w, in) convolution to llama.cpp's (out, in, h, w)
            if name.endswith(("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")):
                data = interleave_rotary_rows(data, heads)  # llama.cpp rotates interleaved pairs
            target = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for {config.get('model_type')}'s weight {name!r}")
            tensors[target] = data
        breaks = float32(weights[_EMBEDDINGS][_token_id(folder, _BREAK_TOKEN)])
        tensors[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.V_TOK_EMBD_IMG_BREAK]] = breaks
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        vision = config["vision_config"]
        writer.add_vision_attention_layernorm_eps(float(vision.get("layer_norm_eps") or 1e-5))
        writer.add_vision_use_silu(True)  # the only activation `refuse` lets through
        if "spatial_merge_size" in config:
            writer.add_vision_spatial_merge_size(int(config["spatial_merge_size"]))


@register("llava")
class LlavaPixtralProjector(PixtralProjector):
    """A `llava` config with Pixtral's tower (the Hub's Pixtral): no patch merger, the language model under
    `language_model.`; llama.cpp's converter refuses any other tower in a llava config."""

    def refuse(self, config: Dict[str, Any]) -> None:
        tower = (config.get("vision_config") or {}).get("model_type")
        if tower != "pixtral":
            raise UnsupportedProjector(
                f"llava with a {tower!r} vision tower: llama.cpp's converter writes a llava projector only for "
                "Pixtral's tower"
            )
        layer = config.get("vision_feature_layer", -1)
        if layer != -1:
            raise UnsupportedProjector(f"llava with vision_feature_layer={layer}: llama.cpp's Pixtral reads the last")
        merge = config.get("spatial_merge_size", 1)
        if merge != 1:  # llama.cpp counts an image's tokens by it, with or without a merger to merge them
            raise UnsupportedProjector(
                f"llava with spatial_merge_size={merge}: Pixtral's tower has no patch merger, and llama.cpp's Pixtral "
                "would count merged patches"
            )
        act = config.get("projector_hidden_act", "gelu")
        if act != "gelu":
            raise UnsupportedProjector(f"llava with projector_hidden_act={act!r}: llama.cpp's Pixtral runs gelu")
        super().refuse(config)

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text = {"tie_word_embeddings": False, **config["text_config"]}
        named = {
            name.removeprefix(_LANGUAGE_PREFIX): value
            for name, value in weights.items()
            if name.startswith(_LANGUAGE_PREFIX)
        }
        return text, named
