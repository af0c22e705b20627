# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma 4's text model as llama.cpp's gemma4: keys, settings refused, the proportional-rope tensor and the experts.

Gemma 4 mixes sliding layers (their own head size and rope base) with full layers (a wider head rotating a
fraction of it at frequencies over the whole head), lets the last layers reuse earlier layers' keys and values,
and may add per-layer token embeddings; the 26B-A4B adds routed experts beside each layer's dense MLP. The keys
follow llama.cpp's loader (`src/models/gemma4.cpp`, llama-cpp-python 0.3.36) and are derived from what mlx_lm's
`gemma4_text` computes, where the two could read a config apart.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..families import Family
from .base import Converter, refusing

# The 26B-A4B's expert block under mlx_lm's names: the stacked projections and the router's two scales.
_EXPERT_WEIGHT = re.compile(
    r"^model\.layers\.(\d+)\.(experts\.switch_glu\.(gate|up|down)_proj\.weight|router\.scale|router\.per_expert_scale)$"
)
# A frequency divisor so large that llama.cpp leaves that pair of dimensions unrotated, as its converter writes it.
_UNROTATED = 1e30


class Gemma4Unsupported(NotImplementedError):
    """A Gemma 4 setting llama.cpp's gemma4 graph does not reproduce as mlx_lm runs it."""


def layer_types(config: Dict[str, Any]) -> List[str]:
    """Each layer's attention kind, derived from the pattern when the config lists none, as mlx_lm derives it."""
    if config.get("layer_types"):
        return list(config["layer_types"])
    pattern = int(config.get("sliding_window_pattern") or 5)
    kinds = ["sliding_attention"] * (pattern - 1) + ["full_attention"]
    return [kinds[layer % pattern] for layer in range(int(config["num_hidden_layers"]))]


def _rope(config: Dict[str, Any], kind: str) -> Dict[str, Any]:
    defaults = {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0, "rope_type": "default"},
    }
    return dict((config.get("rope_parameters") or defaults).get(kind) or defaults[kind])


def _global_head_dim(config: Dict[str, Any]) -> int:
    return int(config.get("global_head_dim") or config.get("head_dim") or 256)


def refuse_unsupported(config: Dict[str, Any]) -> None:
    """Name each setting exported Gemma 4 files would not run as the MLX model did, before any work."""
    if config.get("attention_k_eq_v"):
        raise Gemma4Unsupported("gemma4_text with attention_k_eq_v=True: not checked against llama.cpp here")
    full, sliding = _rope(config, "full_attention"), _rope(config, "sliding_attention")
    if full.get("rope_type") != "proportional":
        raise Gemma4Unsupported(
            f"gemma4_text with full-attention rope_type {full.get('rope_type')!r}: llama.cpp's converter writes "
            "Gemma 4's proportional rope only"
        )
    if sliding.get("rope_type", "default") != "default" or float(sliding.get("partial_rotary_factor", 1.0)) != 1.0:
        raise Gemma4Unsupported(
            "gemma4_text with sliding layers rotating other than a plain full-head rope: mlx_lm and llama.cpp would "
            "read it apart"
        )
    per_layer = int(config.get("hidden_size_per_layer_input") or 0)
    per_layer_vocab = int(config.get("vocab_size_per_layer_input") or config["vocab_size"])
    if per_layer and per_layer_vocab != int(config["vocab_size"]):
        raise Gemma4Unsupported(
            "gemma4_text with vocab_size_per_layer_input other than vocab_size: llama.cpp's per-layer embeddings "
            "have one row per token of the vocabulary"
        )


def split_weight(name: str, data: np.ndarray) -> Optional[List[Tuple[str, np.ndarray, bool]]]:
    """An expert-block weight under llama.cpp's name, or None for any other weight (the name map renames those)."""
    match = _EXPERT_WEIGHT.match(name)
    if match is None:
        return None
    layer, part, projection = match.groups()
    if projection is not None:
        return [(f"blk.{layer}.ffn_{projection}_exps.weight", data, True)]
    # The router's input scale multiplies its normed input; the per-expert scale, each chosen expert's output.
    tensor = "ffn_gate_inp.scale" if part == "router.scale" else "ffn_down_exps.scale"
    return [(f"blk.{layer}.{tensor}", data, True)]


def feed_forward_lengths(config: Dict[str, Any]) -> List[int]:
    """Each layer's MLP width: the layers reusing keys and values are twice as wide under use_double_wide_mlp."""
    layers = int(config["num_hidden_layers"])
    first_shared = layers - int(config.get("num_kv_shared_layers") or 0)
    width = int(config["intermediate_size"])
    double = bool(config.get("use_double_wide_mlp", True))
    return [width * (2 if double and 0 < first_shared <= layer else 1) for layer in range(layers)]


def write_hyperparameters(writer: Any, config: Dict[str, Any], rms_eps: float) -> None:
    """Every `gemma4.*` key llama.cpp's loader reads: the full layers' head size and rope as the main keys, the
    sliding layers' under `_swa`."""
    kinds = layer_types(config)
    sliding = [kind == "sliding_attention" for kind in kinds]
    full_rope, sliding_rope = _rope(config, "full_attention"), _rope(config, "sliding_attention")
    global_head, local_head = _global_head_dim(config), int(config.get("head_dim") or 256)
    writer.add_context_length(int(config.get("max_position_embeddings") or 131072))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(feed_forward_lengths(config))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or 1))
    writer.add_key_length(global_head)
    writer.add_value_length(global_head)
    writer.add_key_length_swa(local_head)
    writer.add_value_length_swa(local_head)
    writer.add_rope_dimension_count(global_head)  # the unrotated part is marked in rope_freqs, not cut off here
    writer.add_rope_dimension_count_swa(local_head)
    writer.add_rope_freq_base(float(full_rope.get("rope_theta", 1000000.0)))
    writer.add_rope_freq_base_swa(float(sliding_rope.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(rms_eps)
    writer.add_sliding_window(int(config.get("sliding_window") or 512))
    writer.add_sliding_window_pattern(sliding)
    writer.add_shared_kv_layers(int(config.get("num_kv_shared_layers") or 0))
    writer.add_embedding_length_per_layer_input(int(config.get("hidden_size_per_layer_input") or 0))
    if config.get("enable_moe_block"):
        writer.add_expert_count(int(config["num_experts"]))
        writer.add_expert_used_count(int(config["top_k_experts"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
    if config.get("final_logit_softcapping", 30.0) is not None:
        writer.add_final_logit_softcapping(float(config.get("final_logit_softcapping", 30.0)))


def rope_frequency_factors(config: Dict[str, Any]) -> np.ndarray:
    """The full layers' proportional rope as llama.cpp's frequency divisors: the rotated pairs at the whole head's
    frequencies times the rope factor, the rest unrotated."""
    rope = _rope(config, "full_attention")
    dims = _global_head_dim(config)
    rotated = int(dims * float(rope.get("partial_rotary_factor", 1.0)))
    factor = float(rope.get("factor", 1.0))
    return np.array([factor] * (rotated // 2) + [_UNROTATED] * ((dims - rotated) // 2), dtype=np.float32)


class Gemma4(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        refusing(refuse_unsupported, Gemma4Unsupported, config)

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Tuple[str, np.ndarray, bool]]:
        own = split_weight(name, data)
        return super().split_weight(name, data, config) if own is None else own

    def rope_tensors(self, config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {"rope_freqs.weight": rope_frequency_factors(config)}

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        write_hyperparameters(writer, config, float(config.get("rms_norm_eps") or 1e-6))


CONVERTERS = {"gemma4_text": Gemma4(Family("gemma4"))}
