# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which type each tensor gets in a K-quant mix, as `llama-quantize` chooses without an importance matrix.

The choice follows llama.cpp's `llama_tensor_get_type` for the mixes written here: the output matrix (or the
token embedding a model shares with it) in Q6_K, more bits for the attention values and the feed-forward down
projections of some layers, and a legacy 32-wide type where a row does not divide into 256-wide super-blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Sequence, Tuple

# method -> the type most tensors get.
MIX_BASE = {
    "q2_k": "Q2_K",
    "q3_k_s": "Q3_K",
    "q3_k_m": "Q3_K",
    "q3_k_l": "Q3_K",
    "q4_k_s": "Q4_K",
    "q4_k_m": "Q4_K",
    "q5_k_s": "Q5_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
}
BLOCK_WIDTH = {"Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}
BLOCK_WIDTH.update({"Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "F16": 1, "F32": 1})
# llama.cpp's 32-wide stand-in for a K-quant a row's width does not allow.
_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
# Name parts of tensors llama.cpp keeps in their own type (norms, routers, small convolutions and tables).
_NEVER_QUANTIZED = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "attn_rel_b.weight",
    *(
        f"time_mix_{part}.weight"
        for part in ("first", "w0", "w1", "w2", "v0", "v1", "v2", "a0", "a1", "a2", "g1", "g2")
    ),
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
)
_EXACT_NEVER_QUANTIZED = {"position_embd.weight", "token_types.weight"}
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelShape:
    """What the type choice reads from the model's hyperparameters."""

    architecture: str
    layers: int
    heads: int
    kv_heads: int
    experts: int = 0

    @property
    def gqa(self) -> int:
        return self.heads // self.kv_heads if self.kv_heads else 0


def _layer_of(name: str) -> int:
    match = _LAYER.match(name)
    return int(match.group(1)) if match else -1


def llama_order(names: Iterable[str]) -> list:
    """The order llama.cpp's model loader walks tensors in: by layer (non-layer tensors first), then by name."""
    return sorted(names, key=lambda name: (_layer_of(name), name))


def quantizable(name: str, shape: Sequence[int]) -> bool:
    """Whether `llama-quantize` converts this tensor at all (matrices named *weight, norms and small tables kept)."""
    if len(shape) < 2 or not name.endswith("weight") or name in _EXACT_NEVER_QUANTIZED:
        return False
    return not any(part in name for part in _NEVER_QUANTIZED)


def category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for part, kind in (
        ("attn_qkv.weight", "attn_v"),
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if part in name:
            return kind
    return "other"


def _more_bits(layer: int, layers: int) -> bool:
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


class _Chooser:
    """One pass over the tensors in llama.cpp's order, keeping its per-category counters."""

    def __init__(self, method: str, shape: ModelShape, names: Sequence[str]) -> None:
        self.method, self.shape = method, shape
        self.base = MIX_BASE[method]
        kinds = [category(name) for name in names]
        self.tied = "output" not in kinds
        self.values_total = kinds.count("attn_v")
        self.values_seen = 0
        self.seen = {"ffn_down": 0, "ffn_gate": 0, "ffn_up": 0}

    def _layer(self, kind: str, name: str) -> int:
        layer = self.seen[kind]
        if self.shape.experts > 1:
            layer = _layer_of(name)
        self.seen[kind] += 1
        return layer

    def choose(self, name: str, width: int) -> str:
        method, shape, kind = self.method, self.shape, category(name)
        chosen = self.base
        falcon = shape.architecture == "falcon"
        if kind == "output" or (self.tied and kind == "token_embd"):
            chosen = "Q8_0" if falcon or width % BLOCK_WIDTH[chosen] else "Q6_K"
        elif kind == "attn_v":
            if method == "q2_k":
                chosen = "Q4_K" if shape.gqa >= 4 else "Q3_K"
            elif method == "q3_k_m":
                chosen = "Q5_K" if self.values_seen < 2 else "Q4_K"
            elif method == "q3_k_l":
                chosen = "Q5_K"
            elif method in ("q4_k_m", "q5_k_m") and _more_bits(self.values_seen, self.values_total):
                chosen = "Q6_K"
            elif method == "q4_k_s" and self.values_seen < 4:
                chosen = "Q5_K"
            if shape.experts == 8:
                chosen = "Q8_0"
            self.values_seen += 1
        elif kind == "attn_k" and shape.experts == 8:
            chosen = "Q8_0"
        elif kind == "ffn_down":
            layer, layers = self._layer(kind, name), shape.layers
            if method == "q2_k":
                chosen = "Q3_K"
            elif method == "q3_k_m":
                more = not falcon or _more_bits(layer, layers)
                chosen = "Q5_K" if layer < layers // 16 else "Q4_K" if more else "Q3_K"
            elif method == "q3_k_l":
                chosen = "Q4_K" if falcon else "Q5_K"
            elif method == "q4_k_m":
                if falcon:
                    chosen = "Q6_K" if layer < layers // 16 else "Q5_K" if _more_bits(layer, layers) else "Q4_K"
                elif _more_bits(layer, layers):
                    chosen = "Q6_K"
            elif method == "q5_k_m" and _more_bits(layer, layers):
                chosen = "Q6_K"
            elif method == "q4_k_s" and not falcon and layer < layers // 8:
                chosen = "Q5_K"
        elif kind == "attn_output":
            if falcon:
                chosen = "Q4_K" if method == "q3_k_l" else chosen
            elif shape.experts == 8:
                chosen = "Q5_K" if method in ("q2_k", "q3_k_s", "q3_k_m", "q4_k_s", "q4_k_m") else chosen
            else:
                chosen = {"q2_k": "Q3_K", "q3_k_m": "Q4_K", "q3_k_l": "Q5_K"}.get(method, chosen)
        elif kind in ("ffn_gate", "ffn_up"):
            self._layer(kind, name)
        return _fit(chosen, width)


def _fit(chosen: str, width: int) -> str:
    """llama.cpp's stand-in when the row width does not divide into the type's blocks: a 32-wide type, else F16."""
    if width % BLOCK_WIDTH[chosen] == 0:
        return chosen
    chosen = _FALLBACK.get(chosen, chosen)
    return chosen if width % BLOCK_WIDTH[chosen] == 0 else "F16"


def choose_types(method: str, shapes: Mapping[str, Tuple[int, ...]], shape: ModelShape) -> Dict[str, str]:
    """Every tensor's type in the `method` mix; a tensor llama.cpp does not quantize keeps "F32"."""
    if method not in MIX_BASE:
        raise ValueError(f"quantization_method={method!r} is not a K-quant mix; known: {', '.join(MIX_BASE)}")
    names = llama_order(shapes)
    chooser = _Chooser(method, shape, names)
    types = {}
    for name in names:
        dims = tuple(shapes[name])
        # numpy's last axis is ggml's first dimension, the row width.
        types[name] = chooser.choose(name, int(dims[-1])) if quantizable(name, dims) else "F32"
    return types
