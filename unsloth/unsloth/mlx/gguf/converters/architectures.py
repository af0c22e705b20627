# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The reshapes and splits several families share, told apart by weight name: stacked experts, convolution kernels,
selection biases, attention sinks, Granite 4.0-H's Mamba 2 and shared MLP. Each family's own entry (`base.Converter`)
decides which of them it uses. Shapes follow llama.cpp's loader (`src/models/<arch>.cpp`) at the version
llama-cpp-python 0.3.36 vendors; recurrent layers are told apart there by a head_count_kv of 0.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
# mlx_lm stacks each expert projection into one (experts, out, in) array under `switch_mlp`.
_STACKED_EXPERTS = re.compile(r"\.(?:switch_mlp|experts)\.(gate|up|down)_proj\.weight$")
# (name, data, whether name is already llama.cpp's): the others go through gguf.TensorNameMap.
Piece = Tuple[str, np.ndarray, bool]


def _layer(name: str) -> int:
    match = _LAYER.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a per-layer weight")
    return int(match.group(1))


def blk(name: str, tensor: str) -> str:
    return f"blk.{_layer(name)}.{tensor}"


def has_experts(config: Dict[str, Any]) -> bool:
    return bool(config.get("num_local_experts") or config.get("num_experts"))


def attention_kv_heads(config: Dict[str, Any], attends: Optional[List[bool]]) -> Union[int, List[int]]:
    """head_count_kv: one number, or one per layer with 0 marking a recurrent layer (how llama.cpp finds them)."""
    kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    return kv_heads if attends is None else [kv_heads if attention else 0 for attention in attends]


def ssm_inner_size(config: Dict[str, Any]) -> int:
    return int(config["mamba_n_heads"]) * int(config["mamba_d_head"])


def split_weight(name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """One MLX weight as the llama.cpp tensors it becomes (usually itself, renamed later by the name map)."""
    experts = _STACKED_EXPERTS.search(name)
    if experts is not None:
        return [(blk(name, f"ffn_{experts.group(1)}_exps.weight"), data, True)]
    if name.endswith((".conv.conv.weight", ".mamba.conv1d.weight")):
        return [(name, data.reshape(data.shape[0], -1), False)]  # (channels, kernel, 1) to llama.cpp's 2-D kernel
    if name.endswith(".feed_forward.expert_bias"):
        return [(blk(name, "exp_probs_b.bias"), data, True)]
    if name.endswith(".mlp.gate.e_score_correction_bias"):
        return [(blk(name, "exp_probs_b.bias"), data, True)]
    if name.endswith(".layer_scalar"):
        return [(blk(name, "layer_output_scale.weight"), data.reshape(1), True)]  # Gemma 4's per-layer scale
    if name.endswith(".self_attn.sinks"):
        return [(name + ".weight", data, False)]  # llama.cpp names gpt-oss's sinks as a weight
    if name.endswith(".mamba.dt_bias"):
        return [(blk(name, "ssm_dt.bias"), data, True)]
    if name.endswith(".mamba.A_log"):
        return [(name, -np.exp(data).reshape(-1, 1), False)]  # llama.cpp stores A itself, one per head
    if name.endswith(".mamba.D"):
        return [(name, data.reshape(-1, 1), False)]
    if name.endswith(".mamba.norm.weight"):
        return [(name, data.reshape(int(config.get("mamba_n_groups") or 1), -1), False)]  # normed per group
    if name.endswith(".shared_mlp.input_linear.weight"):
        gate, up = np.split(data, 2, axis=0)  # gate rows first, as Granite's forward splits them
        suffix = "_shexp" if has_experts(config) else ""
        return [(blk(name, f"ffn_gate{suffix}.weight"), gate, True), (blk(name, f"ffn_up{suffix}.weight"), up, True)]
    if name.endswith(".shared_mlp.output_linear.weight"):
        return [(blk(name, "ffn_down_shexp.weight" if has_experts(config) else "ffn_down.weight"), data, True)]
    return [(name, data, False)]
