# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Falcon-H1 and Nemotron-H (Mamba 2 hybrids) as llama.cpp's falcon-h1, nemotron_h and nemotron_h_moe; Mamba (1) and
Mamba 2 alone as llama.cpp's mamba and mamba2; Jamba (Mamba 1 with attention) as jamba; PLaMo 2 (Mamba 2 with
attention) as plamo2.

Falcon-H1 runs a Mamba 2 mixer beside attention in every block; Nemotron-H gives each block one mixer, Mamba 2,
attention (no rotary embeddings), a relu² MLP or sigmoid-routed experts, as its `hybrid_override_pattern` says.
mlx_lm folds Falcon-H1's multipliers into the weights when it loads a Hub checkpoint, except the tied head's
`lm_head_multiplier / embedding_multiplier`, which it applies to the logits: that one is written into an output
matrix here, since llama.cpp's falcon-h1 graph applies no multiplier. Shapes and keys follow llama.cpp's loader
(`src/models/falcon-h1.cpp`, `nemotron-h.cpp`, `mamba-base.cpp`, llama-cpp-python 0.3.36).
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Tuple

import numpy as np

from ..families import Family, UnsupportedModel
from .base import Converter, refusing

NEMOTRON_H_MOE = Family("nemotron_h_moe", key="NEMOTRON_H_MOE")
# Each weight's layer, under either family's prefix.
_LAYER = re.compile(r"^(?:model|backbone)\.layers\.(\d+)\.")
_MIXER = re.compile(r"\.(?:mamba|mixer)\.")
# The mlx_lm argument saying whether the Mamba convolution has a bias, per family.
_CONV_BIAS = {"falcon_h1": "mamba_conv_bias", "nemotron_h": "use_conv_bias", "mamba2": "use_conv_bias"}
# (name, data, whether name is already llama.cpp's), as architectures.Piece.
Piece = Tuple[str, np.ndarray, bool]


class MambaHybridUnsupported(NotImplementedError):
    """A Falcon-H1 or Nemotron-H setting llama.cpp's graph does not reproduce as mlx_lm runs it."""


def _blk(name: str, tensor: str) -> str:
    match = _LAYER.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a per-layer weight")
    return f"blk.{match.group(1)}.{tensor}"


def _mlx_args(config: Dict[str, Any]) -> Any:
    """The model arguments mlx_lm builds from the config, with its defaults for the keys the config leaves out."""
    import importlib

    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    return module.ModelArgs.from_dict(config)


def pattern(config: Dict[str, Any]) -> List[str]:
    """Nemotron-H's block kinds, one character each (M Mamba 2, * attention, - MLP, E experts), as mlx_lm reads them."""
    return list(_mlx_args(config).hybrid_override_pattern)


def with_common_keys(config: Dict[str, Any]) -> Dict[str, Any]:
    """Nemotron-H's config with the layer count mlx_lm builds (one per pattern entry, whatever num_hidden_layers
    says)."""
    return {**config, "num_hidden_layers": len(pattern(config))}


def has_experts(config: Dict[str, Any]) -> bool:
    return config.get("model_type") == "nemotron_h" and "E" in pattern(config)


def family_for(config: Dict[str, Any], listed: Family) -> Family:
    """Nemotron-H with experts is llama.cpp's nemotron_h_moe, as its converter writes it; the rest as listed."""
    return NEMOTRON_H_MOE if has_experts(config) else listed


def refuse_unsupported(config: Dict[str, Any]) -> None:
    """Name each setting exported files would not run as the MLX model did, before any work."""
    args = _mlx_args(config)
    if config["model_type"] == "falcon_h1":
        _refuse_falcon_h1(args)
    else:
        _refuse_nemotron_h(args)


def _refuse_falcon_h1(args: Any) -> None:
    if args.mamba_proj_bias or args.projectors_bias:
        raise MambaHybridUnsupported(
            "falcon_h1 with mamba_proj_bias or projectors_bias: llama.cpp's falcon-h1 has no Mamba projection biases"
        )
    if args.attention_bias:
        raise MambaHybridUnsupported("falcon_h1 with attention_bias=True: llama.cpp's falcon-h1 drops o_proj's bias")
    if args.mamba_d_ssm != args.mamba_n_heads * args.mamba_d_head:
        raise MambaHybridUnsupported("falcon_h1 with mamba_d_ssm other than mamba_n_heads * mamba_d_head")
    if args.mamba_rms_norm and args.mamba_norm_before_gate:
        raise MambaHybridUnsupported(
            "falcon_h1 with mamba_norm_before_gate=True: llama.cpp gates the Mamba output before its norm"
        )
    if args.mamba_rms_norm and args.mamba_n_groups > 1:
        raise MambaHybridUnsupported(
            "falcon_h1 with mamba_rms_norm and mamba_n_groups > 1: mlx_lm norms the whole Mamba output at once, "
            "llama.cpp each group"
        )


def _refuse_nemotron_h(args: Any) -> None:
    if args.mamba_proj_bias:
        raise MambaHybridUnsupported("nemotron_h with mamba_proj_bias=True: llama.cpp's nemotron_h has no such biases")
    low, high = args.time_step_limit
    if float(low) > 0.0 or math.isfinite(float(high)):
        raise MambaHybridUnsupported(
            f"nemotron_h with time_step_limit={tuple(args.time_step_limit)!r}: llama.cpp's scan never clips the step"
        )
    if "E" not in args.hybrid_override_pattern:
        return
    if args.n_shared_experts is None:
        raise MambaHybridUnsupported(
            "nemotron_h with experts but no shared expert: llama.cpp's nemotron_h_moe needs one"
        )
    if args.mlp_bias:
        raise MambaHybridUnsupported(
            "nemotron_h with experts and mlp_bias=True: llama.cpp's shared expert and latent projections have no bias"
        )
    if int(args.n_group or 1) > 1 and int(args.topk_group or 1) < int(args.n_group):
        raise MambaHybridUnsupported(
            "nemotron_h choosing experts within topk_group of n_group groups: llama.cpp's nemotron_h_moe reads no groups"
        )


def kv_head_counts(config: Dict[str, Any]) -> List[int]:
    """head_count_kv per layer: 0 outside attention, which is how llama.cpp tells the other layers apart."""
    kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    return [kv_heads if kind == "*" else 0 for kind in pattern(config)]


def feed_forward_lengths(config: Dict[str, Any]) -> List[int]:
    """feed_forward_length per layer: nonzero only in the MLP and expert layers, as llama.cpp's loader reads it."""
    args = _mlx_args(config)
    widths = {"-": int(args.intermediate_size), "E": int(args.moe_intermediate_size or 0)}
    return [widths.get(kind, 0) for kind in args.hybrid_override_pattern]


def rms_norm_eps(config: Dict[str, Any]) -> float:
    """The norms' epsilon mlx_lm uses: Nemotron-H keeps it as layer_norm_epsilon."""
    args = _mlx_args(config)
    return float(args.layer_norm_epsilon if config["model_type"] == "nemotron_h" else args.rms_norm_eps)


def split_weight(name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """One MLX weight as the llama.cpp tensors it becomes, the Mamba 2 ones reshaped as llama.cpp holds them."""
    if name == "model.embed_tokens.weight" and config["model_type"] == "falcon_h1":
        return _falcon_h1_embeddings(data, config)
    if _MIXER.search(name) is None:
        return [(name, data, False)]
    if name.endswith(".conv1d.weight"):
        pieces = [(name, data.reshape(data.shape[0], -1), False)]  # (channels, kernel, 1) to a 2-D kernel
        if not getattr(_mlx_args(config), _CONV_BIAS[config["model_type"]]):
            # llama.cpp's Mamba 2 graph adds the convolution bias unconditionally: none is zeros.
            pieces.append((_blk(name, "ssm_conv1d.bias"), np.zeros(data.shape[0], dtype=np.float32), True))
        return pieces
    if name.endswith(".dt_bias"):
        return [(_blk(name, "ssm_dt.bias"), data, True)]
    if name.endswith(".A_log"):
        return [(_blk(name, "ssm_a"), -np.exp(data).reshape(-1, 1), True)]  # llama.cpp stores A, one per head
    if name.endswith(".D"):
        return [(_blk(name, "ssm_d"), data.reshape(-1, 1), True)]
    if name.endswith(".norm.weight"):
        groups = int(config.get("mamba_n_groups") or config.get("n_groups") or 1)
        return [(_blk(name, "ssm_norm.weight"), data.reshape(groups, -1), True)]  # normed per group
    if name.endswith(".switch_mlp.fc1.weight"):
        return [(_blk(name, "ffn_up_exps.weight"), data, True)]
    if name.endswith(".switch_mlp.fc2.weight"):
        return [(_blk(name, "ffn_down_exps.weight"), data, True)]
    if name.endswith(".gate.e_score_correction_bias"):
        return [(_blk(name, "exp_probs_b.bias"), data, True)]
    if name.endswith(".fc2_latent_proj.weight"):
        return [(_blk(name, "ffn_latent_up.weight"), data, True)]
    return [(name, data, False)]


def _falcon_h1_embeddings(data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """The token embeddings, and for a tied head whose logits mlx_lm scales, the output matrix with that scale."""
    pieces: List[Piece] = [("model.embed_tokens.weight", data, False)]
    args = _mlx_args(config)
    scale = float(args.lm_head_multiplier) / float(args.embedding_multiplier)
    if args.tie_word_embeddings and scale != 1.0:
        pieces.append(("output.weight", data * np.float32(scale), True))
    return pieces


def write_keys(writer: Any, config: Dict[str, Any], architecture: str) -> None:
    """The Mamba 2 keys both families need, and Nemotron-H's expert keys."""
    args = _mlx_args(config)
    if architecture == "falcon-h1":
        inner, heads, groups, state, kernel = (
            args.mamba_d_ssm,
            args.mamba_n_heads,
            args.mamba_n_groups,
            args.mamba_d_state,
            args.mamba_d_conv,
        )
        writer.add_vocab_size(int(args.vocab_size))
    else:
        inner, heads, groups = args.mamba_num_heads * args.mamba_head_dim, args.mamba_num_heads, args.n_groups
        state, kernel = args.ssm_state_size, args.conv_kernel
    writer.add_ssm_conv_kernel(int(kernel))
    writer.add_ssm_state_size(int(state))
    writer.add_ssm_group_count(int(groups))
    writer.add_ssm_inner_size(int(inner))
    writer.add_ssm_time_step_rank(int(heads))  # llama.cpp reads the SSM head count here
    if architecture == "nemotron_h_moe":
        _write_nemotron_h_experts(writer, args)


def _write_nemotron_h_experts(writer: Any, args: Any) -> None:
    writer.add_expert_count(int(args.n_routed_experts))
    writer.add_expert_used_count(int(args.num_experts_per_tok))
    writer.add_expert_feed_forward_length(int(args.moe_intermediate_size))
    writer.add_expert_shared_feed_forward_length(int(args.moe_shared_expert_intermediate_size or 0))
    writer.add_expert_shared_count(int(args.n_shared_experts or 0))
    writer.add_expert_weights_norm(bool(args.norm_topk_prob) and int(args.num_experts_per_tok) > 1)
    writer.add_expert_weights_scale(float(args.routed_scaling_factor or 1.0))
    if args.moe_latent_size:
        writer.add_moe_latent_size(int(args.moe_latent_size))


class MambaHybrid(Converter):
    def family_for(self, config: Dict[str, Any]) -> Family:
        return family_for(config, self.family)

    def refuse(self, config: Dict[str, Any]) -> None:
        refusing(refuse_unsupported, MambaHybridUnsupported, config)

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return split_weight(name, data, config)

    def rms_norm_eps(self, config: Dict[str, Any]) -> float:
        return rms_norm_eps(config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        write_keys(writer, config, family.architecture)


class NemotronH(MambaHybrid):
    embedding_weight = "backbone.embeddings.weight"

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return with_common_keys(config)

    def kv_head_counts(self, config: Dict[str, Any]) -> List[int]:
        return kv_head_counts(config)

    def feed_forward_length(self, config: Dict[str, Any]) -> List[int]:
        return feed_forward_lengths(config)


class Mamba(Converter):
    """Mamba (1): every block one selective-scan mixer, no attention; mlx_lm's norms use RMSNorm's default epsilon
    whatever the config says, and its convolution kernel is (channels, kernel, 1)."""

    embedding_weight = "backbone.embeddings.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        args = _mlx_args(config)
        if args.use_bcdt_rms:
            raise UnsupportedModel(
                "mamba with its time step, B and C normed (Falcon Mamba's use_bcdt_rms): mlx_lm norms them with "
                "mixer_rms_eps, llama.cpp with the layers' epsilon"
            )
        if args.use_bias or not args.use_conv_bias:
            raise UnsupportedModel(
                "mamba with use_bias=True or use_conv_bias=False: llama.cpp's mamba reads a convolution bias and no "
                "projection biases"
            )

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        # head_count 0, as it is written, is what K-quant mixes read
        return {**config, "num_hidden_layers": int(_mlx_args(config).num_hidden_layers), "num_attention_heads": 0}

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".mixer.conv1d.weight"):
            return [(name, data.reshape(data.shape[0], -1), False)]
        if name.endswith(".mixer.A_log"):
            return [(name, -np.exp(data), False)]  # llama.cpp stores A itself
        return [(name, data, False)]

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        args = _mlx_args(config)
        writer.add_context_length(int(config.get("max_position_embeddings") or 1048576))
        writer.add_embedding_length(int(args.hidden_size))
        writer.add_block_count(int(args.num_hidden_layers))
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(int(args.conv_kernel))
        writer.add_ssm_inner_size(int(args.intermediate_size))
        writer.add_ssm_state_size(int(args.state_size))
        writer.add_ssm_time_step_rank(int(args.time_step_rank))
        writer.add_ssm_dt_b_c_rms(False)
        writer.add_layer_norm_rms_eps(1e-5)  # nn.RMSNorm's default, which mlx_lm's mamba uses


class Mamba2(Converter):
    """Mamba 2 alone: every block one Mamba 2 mixer under a plain RMSNorm (nn.RMSNorm's default epsilon in mlx_lm),
    its gated output normed over the whole inner width."""

    embedding_weight = "backbone.embeddings.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        args = _mlx_args(config)
        if args.use_bias:
            raise UnsupportedModel("mamba2 with use_bias=True: llama.cpp's mamba2 has no projection biases")
        if int(args.n_groups) > 1:
            raise UnsupportedModel(
                "mamba2 with n_groups > 1: mlx_lm norms the whole gated output at once, llama.cpp each group"
            )
        low, high = args.time_step_limit
        if float(low) > 0.0 or math.isfinite(float(high)):
            raise UnsupportedModel(
                f"mamba2 with time_step_limit={tuple(args.time_step_limit)!r}: llama.cpp's scan never clips the step"
            )
        if float(args.layer_norm_epsilon) != 1e-5:
            raise UnsupportedModel(
                f"mamba2 with layer_norm_epsilon {args.layer_norm_epsilon!r}: mlx_lm norms each block's input with "
                "1e-5 whatever the config says, llama.cpp every norm with the config's epsilon"
            )

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {**config, "num_attention_heads": 0}  # the head count it is written with, which K-quant mixes read

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return split_weight(name, data, config)

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        args = _mlx_args(config)
        writer.add_context_length(int(args.max_position_embeddings))
        writer.add_embedding_length(int(args.hidden_size))
        writer.add_block_count(int(args.num_hidden_layers))
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(int(args.conv_kernel))
        writer.add_ssm_inner_size(int(args.num_heads) * int(args.head_dim))
        writer.add_ssm_state_size(int(args.ssm_state_size))
        writer.add_ssm_time_step_rank(int(args.num_heads))  # llama.cpp reads the SSM head count here
        writer.add_ssm_group_count(int(args.n_groups))
        writer.add_layer_norm_rms_eps(float(args.layer_norm_epsilon))


class Jamba(Converter):
    """Jamba: Mamba (1) blocks with their time step, B and C normed, attention blocks without rotary embeddings
    (head_count_kv 0 marks the Mamba ones), each followed by a dense MLP or softmax-weighted experts."""

    def refuse(self, config: Dict[str, Any]) -> None:
        args = _mlx_args(config)
        if int(args.mamba_expand) != 2:
            raise UnsupportedModel("jamba with mamba_expand other than 2: llama.cpp's jamba supports only 2")
        if args.mamba_proj_bias:
            raise UnsupportedModel("jamba with mamba_proj_bias=True: llama.cpp's jamba has no projection biases")
        experts = int(args.num_experts)
        if experts > 1 and int(args.num_experts_per_tok) < experts:
            raise UnsupportedModel(
                "jamba choosing some of its experts: mlx_lm weighs them by a softmax over the chosen alone, "
                "llama.cpp's jamba by the softmax over all of them"
            )

    def kv_head_counts(self, config: Dict[str, Any]) -> List[int]:
        args = _mlx_args(config)
        return [int(args.num_key_value_heads) if kind == "attention" else 0 for kind in args.layers_block_type]

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".mamba.conv1d.weight"):
            pieces: List[Piece] = [(name, data.reshape(data.shape[0], -1), False)]
            if not _mlx_args(config).mamba_conv_bias:  # llama.cpp's Mamba graph always adds one
                pieces.append((_blk(name, "ssm_conv1d.bias"), np.zeros(data.shape[0], dtype=np.float32), True))
            return pieces
        if name.endswith(".mamba.A_log"):
            return [(_blk(name, "ssm_a"), -np.exp(data), True)]  # llama.cpp stores A itself
        if name.endswith(".mamba.D"):
            return [(_blk(name, "ssm_d"), data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        args = _mlx_args(config)
        writer.add_ssm_conv_kernel(int(args.mamba_d_conv))
        writer.add_ssm_inner_size(int(args.mamba_expand) * int(args.hidden_size))
        writer.add_ssm_state_size(int(args.mamba_d_state))
        writer.add_ssm_time_step_rank(int(args.mamba_dt_rank))
        if int(args.num_experts) > 1:
            writer.add_expert_count(int(args.num_experts))
            writer.add_expert_used_count(int(args.num_experts_per_tok))


# PLaMo 2's weights by their mlx_lm name after the layer (`model.layers.layers.N.`): llama.cpp's name, and the
# offset mlx_lm's RMSNorm adds to a stored weight (llama.cpp's converter adds it to the tensor).
_PLAMO2_LAYER = re.compile(r"^model\.layers\.layers\.(\d+)\.(.+)$")
_PLAMO2_NAMES = {
    "pre_mixer_norm.weight": ("attn_norm.weight", 1.0),
    "post_mixer_norm.weight": ("post_attention_norm", 1.0 / 5),
    "pre_mlp_norm.weight": ("ffn_norm.weight", 1.0),
    "post_mlp_norm.weight": ("post_ffw_norm", 1.0 / 5**1.5),
    "mlp.gate_up_proj.weight": ("ffn_up.weight", 0.0),
    "mlp.down_proj.weight": ("ffn_down.weight", 0.0),
    "mixer.qkv_proj.weight": ("attn_qkv.weight", 0.0),
    "mixer.o_proj.weight": ("attn_output.weight", 0.0),
    "mixer.q_weight": ("attn_q_norm.weight", 0.0),
    "mixer.k_weight": ("attn_k_norm.weight", 0.0),
    "mixer.in_proj.weight": ("ssm_in.weight", 0.0),
    "mixer.bcdt_proj.weight": ("ssm_x.weight", 0.0),
    "mixer.dt_proj.weight": ("ssm_dt.weight", 0.0),
    "mixer.dt_bias": ("ssm_dt.bias", 0.0),
    "mixer.D": ("ssm_d", 0.0),
    "mixer.dt_norm_weight": ("ssm_dt_norm", 0.0),
    "mixer.B_norm_weight": ("ssm_b_norm", 0.0),
    "mixer.C_norm_weight": ("ssm_c_norm", 0.0),
    "mixer.out_proj.weight": ("ssm_out.weight", 0.0),
}


class Plamo2(Converter):
    """PLaMo 2: Mamba 2 mixers (one head group, time step, B and C normed) and, every `mamba_step` layers, attention
    with per-head query/key norms; a norm before and after each mixer and MLP, each stored as an offset from a fixed
    value. mlx_lm attends over the whole context in every attention layer, as llama.cpp's plamo2 does, and rotates
    with base 10000 whatever the config says."""

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        from .latent_attention import as_mlx_lm_reads

        config = as_mlx_lm_reads(config)
        return {**config, "head_dim": int(config["hidden_size_per_head"])}

    def refuse(self, config: Dict[str, Any]) -> None:
        if not self.with_common_keys(config)["mamba_enabled"]:
            raise UnsupportedModel(
                "plamo2 with mamba_enabled=False: llama.cpp's plamo2 keeps a recurrent state it then has no layer "
                "for, and stops on GGML_ASSERT(buffer) at the first decode"
            )
        eps = float(self.with_common_keys(config)["rms_norm_eps"])
        if eps != 1e-6:
            raise UnsupportedModel(
                f"plamo2 with rms_norm_eps {eps!r}: mlx_lm norms queries and keys with 1e-6 whatever the config says, "
                "llama.cpp's plamo2 with the config's epsilon"
            )

    def attention_layers(self, config: Dict[str, Any]) -> List[bool]:
        from mlx_lm.models.plamo2 import is_mamba

        args = _mlx_args(config)
        return [not is_mamba(args, layer) for layer in range(int(args.num_hidden_layers))]

    def head_counts(self, config: Dict[str, Any]) -> int:
        """One count for every layer (head_count_kv's zeros mark the Mamba ones): llama.cpp reads the head width and
        the rotated dims only when the first layer's head count is nonzero, and its rope never returns on zero."""
        return int(config["num_attention_heads"])

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return 10000.0  # mlx_lm's nn.RoPE default: its plamo2 reads no rope_theta

    def rope_scaling(self, config: Dict[str, Any]) -> None:
        return None  # mlx_lm's plamo2 reads none

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        match = _PLAMO2_LAYER.match(name)
        if match is None:
            if name == "model.norm.weight":
                return [("output_norm.weight", data + np.float32(1.0), True)]
            return super().split_weight(name, data, config)
        layer, rest = match.groups()
        if rest == "mixer.conv1d.weight":
            return [(f"blk.{layer}.ssm_conv1d.weight", data.reshape(data.shape[0], -1), True)]
        if rest == "mixer.A_log":
            return [(f"blk.{layer}.ssm_a", -np.exp(data), True)]  # llama.cpp stores A itself
        tensor, offset = _PLAMO2_NAMES[rest]
        return [(f"blk.{layer}.{tensor}", data + np.float32(offset) if offset else data, True)]

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        heads, width = int(config["mamba_num_heads"]), int(config["hidden_size_per_head"])
        writer.add_ssm_state_size(int(config["mamba_d_state"]))
        writer.add_ssm_conv_kernel(int(config["mamba_d_conv"]))
        writer.add_ssm_time_step_rank(heads)
        writer.add_ssm_inner_size(heads * width)
        writer.add_ssm_group_count(0)  # llama.cpp's plamo2 asserts it: B and C are shared by every head


# Nemotron-H with experts is written as nemotron_h_moe.
CONVERTERS = {
    "mamba": Mamba(Family("mamba")),
    "falcon_h1": MambaHybrid(Family("falcon-h1", key="FALCON_H1")),
    "nemotron_h": NemotronH(Family("nemotron_h")),
    "mamba2": Mamba2(Family("mamba2")),
    "jamba": Jamba(Family("jamba")),
    "plamo2": Plamo2(Family("plamo2")),
}
