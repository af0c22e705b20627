# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What the hybrid and mixture-of-experts families need beyond renaming: tensor reshapes and splits, and their keys.

LFM2 (short convolutions between attention blocks, dense or with sigmoid-routed experts), Granite 4.0-H (Mamba 2 between attention blocks, dense or
with experts beside a shared MLP), gpt-oss (experts with biases, attention sinks, alternating sliding windows),
Granite 3 and Qwen 3 MoE. Shapes and keys follow llama.cpp's loader (`src/models/<arch>.cpp`) at the version
llama-cpp-python 0.3.36 vendors; recurrent layers are told apart there by a head_count_kv of 0.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import gemma4, latent_attention, mamba_hybrids

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


def _blk(name: str, tensor: str) -> str:
    return f"blk.{_layer(name)}.{tensor}"


def has_experts(config: Dict[str, Any]) -> bool:
    return bool(config.get("num_local_experts") or config.get("num_experts"))


def attention_layers(config: Dict[str, Any]) -> Optional[List[bool]]:
    """Which layers attend, for the families mixing attention with recurrent blocks; None for the others."""
    model_type = config.get("model_type")
    layers = int(config["num_hidden_layers"])
    if model_type in ("lfm2", "lfm2_moe"):
        indices = config.get("full_attn_idxs")
        if indices is None:
            indices = [i for i, kind in enumerate(config["layer_types"]) if kind == "full_attention"]
        return [layer in set(indices) for layer in range(layers)]
    if model_type == "granitemoehybrid":
        return [kind == "attention" for kind in config["layer_types"]]
    return None


def kv_head_counts(config: Dict[str, Any]) -> Union[int, List[int]]:
    """head_count_kv: one number, or one per layer with 0 marking a recurrent layer (how llama.cpp finds them)."""
    if config.get("model_type") == "nemotron_h":
        return mamba_hybrids.kv_head_counts(config)
    kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    attends = attention_layers(config)
    return kv_heads if attends is None else [kv_heads if attention else 0 for attention in attends]


def feed_forward_length(config: Dict[str, Any]) -> Union[int, List[int]]:
    """The dense MLP width llama.cpp reads: LFM2's `block_ff_dim`, shrunk and rounded as its config asks;
    Nemotron-H's per layer."""
    if config.get("model_type") == "nemotron_h":
        return mamba_hybrids.feed_forward_lengths(config)
    if config.get("model_type") != "lfm2":
        return int(config["intermediate_size"])
    width = int(config.get("block_ff_dim") or config["intermediate_size"])
    if config.get("block_auto_adjust_ff_dim"):
        width = int(2 * width / 3)
        if config.get("block_ffn_dim_multiplier") is not None:
            width = int(float(config["block_ffn_dim_multiplier"]) * width)
        multiple = int(config["block_multiple_of"])
        width = multiple * ((width + multiple - 1) // multiple)
    return width


def ssm_inner_size(config: Dict[str, Any]) -> int:
    return int(config["mamba_n_heads"]) * int(config["mamba_d_head"])


def split_weight(name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """One MLX weight as the llama.cpp tensors it becomes (usually itself, renamed later by the name map)."""
    if config.get("model_type") in mamba_hybrids.MODEL_TYPES:
        return mamba_hybrids.split_weight(name, data, config)
    own = latent_attention.split_weight(name, data, config)
    if own is None and config.get("model_type") == "gemma4_text":
        own = gemma4.split_weight(name, data)
    if own is not None:
        return own
    experts = _STACKED_EXPERTS.search(name)
    if experts is not None:
        return [(_blk(name, f"ffn_{experts.group(1)}_exps.weight"), data, True)]
    if name.endswith((".conv.conv.weight", ".mamba.conv1d.weight")):
        return [(name, data.reshape(data.shape[0], -1), False)]  # (channels, kernel, 1) to llama.cpp's 2-D kernel
    if name.endswith(".feed_forward.expert_bias"):
        return [(_blk(name, "exp_probs_b.bias"), data, True)]
    if name.endswith(".feed_forward.gate.weight") and config.get("model_type") == "lfm2_moe":
        pieces = [(name, data, False)]
        if not config.get("use_expert_bias"):  # llama.cpp's LFM2 MoE requires a selection bias: none is zeros
            pieces.append((_blk(name, "exp_probs_b.bias"), np.zeros(data.shape[0], dtype=np.float32), True))
        return pieces
    if name.endswith(".mlp.gate.e_score_correction_bias"):
        return [(_blk(name, "exp_probs_b.bias"), data, True)]
    if name.endswith(".layer_scalar"):
        return [(_blk(name, "layer_output_scale.weight"), data.reshape(1), True)]  # Gemma 4's per-layer scale
    if name.endswith(".self_attn.sinks"):
        return [(name + ".weight", data, False)]  # llama.cpp names gpt-oss's sinks as a weight
    if name.endswith(".mamba.dt_bias"):
        return [(_blk(name, "ssm_dt.bias"), data, True)]
    if name.endswith(".mamba.A_log"):
        return [(name, -np.exp(data).reshape(-1, 1), False)]  # llama.cpp stores A itself, one per head
    if name.endswith(".mamba.D"):
        return [(name, data.reshape(-1, 1), False)]
    if name.endswith(".mamba.norm.weight"):
        return [(name, data.reshape(int(config.get("mamba_n_groups") or 1), -1), False)]  # normed per group
    if name.endswith(".shared_mlp.input_linear.weight"):
        gate, up = np.split(data, 2, axis=0)  # gate rows first, as Granite's forward splits them
        suffix = "_shexp" if has_experts(config) else ""
        return [(_blk(name, f"ffn_gate{suffix}.weight"), gate, True), (_blk(name, f"ffn_up{suffix}.weight"), up, True)]
    if name.endswith(".shared_mlp.output_linear.weight"):
        return [(_blk(name, "ffn_down_shexp.weight" if has_experts(config) else "ffn_down.weight"), data, True)]
    return [(name, data, False)]


def write_family_keys(writer: Any, config: Dict[str, Any], architecture: str) -> None:
    """The `{arch}.*` keys a family needs beyond the common ones."""
    if has_experts(config):
        writer.add_expert_count(int(config.get("num_local_experts") or config["num_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    if architecture in ("lfm2", "lfm2moe"):
        writer.add_shortconv_l_cache(int(config["conv_L_cache"]))
        writer.add_vocab_size(int(config["vocab_size"]))
    if architecture == "lfm2moe":
        import gguf

        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_leading_dense_block_count(int(config.get("num_dense_layers") or 0))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if architecture == "command-r":
        writer.add_logit_scale(float(config.get("logit_scale") or 0.0625))  # Cohere scales its logits
    if architecture in ("granite", "granitemoe", "granitehybrid"):
        _write_granite_multipliers(writer, config)
    if (
        architecture in ("granitemoe", "granitehybrid")
        and config.get("shared_intermediate_size")
        and has_experts(config)
    ):
        writer.add_expert_shared_feed_forward_length(int(config["shared_intermediate_size"]))
    if architecture == "granitehybrid":
        writer.add_ssm_conv_kernel(int(config["mamba_d_conv"]))
        writer.add_ssm_state_size(int(config["mamba_d_state"]))
        writer.add_ssm_group_count(int(config.get("mamba_n_groups") or 1))
        writer.add_ssm_inner_size(ssm_inner_size(config))
        writer.add_ssm_time_step_rank(int(config["mamba_n_heads"]))  # llama.cpp reads the SSM head count here
    if architecture in ("granite", "granitehybrid"):
        # These graphs apply rotary embeddings only when this flag is set (granitemoe's always do).
        writer.add_rope_scaling_finetuned(config.get("position_embedding_type", "rope") != "nope")
    if architecture in mamba_hybrids.ARCHITECTURES:
        mamba_hybrids.write_keys(writer, config, architecture)
    if architecture == "gpt-oss":
        writer.add_expert_feed_forward_length(int(config["intermediate_size"]))
        writer.add_sliding_window(int(config["sliding_window"]))
        kinds = config.get("layer_types") or [
            "sliding_attention" if layer % 2 == 0 else "full_attention" for layer in range(config["num_hidden_layers"])
        ]
        writer.add_array("gpt-oss.attention.sliding_window_pattern", [kind == "sliding_attention" for kind in kinds])
    if architecture in ("qwen3moe", "qwen2moe"):
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
    if architecture == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))
    if architecture == "ernie4_5-moe":
        _write_ernie_experts(writer, config)
    if architecture == "glm4moe":
        _write_glm4_moe_experts(writer, config)


def _write_glm4_moe_experts(writer: Any, config: Dict[str, Any]) -> None:
    """GLM-4.5's routed experts (sigmoid scores, a selection bias, normalised then scaled) after dense leading
    layers, and its shared experts; the multi-token prediction layers mlx_lm drops are not written."""
    import gguf

    writer.add_expert_count(int(config["n_routed_experts"]))
    writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
    writer.add_expert_shared_count(int(config.get("n_shared_experts") or 0))
    writer.add_leading_dense_block_count(int(config.get("first_k_dense_replace") or 0))
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(float(config.get("routed_scaling_factor") or 1.0))
    writer.add_expert_weights_norm(bool(config.get("norm_topk_prob")))


def _write_ernie_experts(writer: Any, config: Dict[str, Any]) -> None:
    """ERNIE 4.5 MoE's experts: which layers hold them (after the dense leading ones, every interval-th) and their
    widths, the shared experts' as mlx_lm builds them (one MLP as wide as all of them)."""
    width = int(config.get("moe_intermediate_size") or config["intermediate_size"])
    writer.add_expert_count(int(config["moe_num_experts"]))
    writer.add_expert_used_count(int(config.get("moe_k") or 1))
    writer.add_interleave_moe_layer_step(int(config.get("moe_layer_interval") or 1))
    writer.add_leading_dense_block_count(int(config.get("moe_layer_start_index") or 0))
    writer.add_expert_feed_forward_length(width)
    shared = int(config.get("moe_num_shared_experts") or 0)
    writer.add_expert_shared_count(shared)
    if shared:
        writer.add_expert_shared_feed_forward_length(width * shared)


def _write_granite_multipliers(writer: Any, config: Dict[str, Any]) -> None:
    """Granite's four scalars, under llama.cpp's `_scale` names."""
    for key, add in (
        ("attention_multiplier", writer.add_attention_scale),
        ("embedding_multiplier", writer.add_embedding_scale),
        ("residual_multiplier", writer.add_residual_scale),
        ("logits_scaling", writer.add_logit_scale),
    ):
        if config.get(key) or key == "logits_scaling":  # Granite MoE's loader requires the logit scale
            add(float(config.get(key) or 1.0))
