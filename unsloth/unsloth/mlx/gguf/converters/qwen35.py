# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Qwen 3.5's language model, dense or with experts, as llama.cpp's qwen35 / qwen35moe, and Qwen3-Next, their
forerunner, as llama.cpp's qwen3next: keys, reshapes, refusals.

Qwen 3.5 runs gated delta-net blocks (a short convolution over the fused query, key and value projections, then a
decaying recurrent state) with a full-attention block every `full_attention_interval`-th layer, whose query
projection also carries a sigmoid gate per head. The keys and shapes follow llama.cpp's loader (`src/models/qwen35.cpp`,
`qwen35moe.cpp`, llama-cpp-python 0.3.36); the values are what mlx_lm's `qwen3_5` computes, whose stored norms already
hold Hugging Face's `1 + weight`. Kimi Linear's delta-net layers (a decay per channel) go as llama.cpp's kimi-linear.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

import numpy as np

from ..families import Family, UnsupportedModel
from .base import Converter, refusing, scaling_of

from .architectures import Piece, split_weight as split_common_weight

# What mlx_lm's TextModelArgs rotates by when a config has no rope_parameters (its rope_theta is then ignored).
_MLX_LM_DEFAULT_ROPE: Dict[str, Any] = {"type": "default", "mrope_section": [11, 11, 10], "rope_theta": 100000.0}
_LINEAR = ".linear_attn."


class Qwen35Unsupported(NotImplementedError):
    """A Qwen 3.5 setting llama.cpp's qwen35 graphs do not reproduce as mlx_lm runs it."""


def rope(config: Dict[str, Any]) -> Dict[str, Any]:
    """The rope settings mlx_lm reads: `rope_parameters`, or its own default when the config has none."""
    return dict(config.get("rope_parameters") or _MLX_LM_DEFAULT_ROPE)


def rotary_dims(config: Dict[str, Any]) -> int:
    return int(_head_dim(config) * float(rope(config).get("partial_rotary_factor", 0.25)))


def rope_sections(config: Dict[str, Any]) -> List[int]:
    """llama.cpp's four multimodal rope sections; text positions are equal in the first three, zero in the fourth."""
    sections = [int(size) for size in rope(config).get("mrope_section") or _MLX_LM_DEFAULT_ROPE["mrope_section"]]
    return (sections + [0, 0, 0, 0])[:4]


def _head_dim(config: Dict[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def _experts(config: Dict[str, Any]) -> int:
    return int(config.get("num_experts") or 0)


def refuse_unsupported(config: Dict[str, Any]) -> None:
    """Name each setting exported Qwen 3.5 files would not run as the MLX model did, before any work."""
    model_type = config.get("model_type")
    key_dim, value_dim = int(config["linear_key_head_dim"]), int(config["linear_value_head_dim"])
    if key_dim != value_dim:
        raise Qwen35Unsupported(
            f"{model_type} with linear_key_head_dim {key_dim} != linear_value_head_dim {value_dim}: llama.cpp's "
            "qwen35 reads one head size (ssm.state_size) for both"
        )
    parameters = rope(config)
    kind = parameters.get("type", parameters.get("rope_type", "default"))
    if kind != "default":
        raise Qwen35Unsupported(f"{model_type} with rope type {kind!r}: only the plain rope is checked here")
    covered = 2 * sum(rope_sections(config)[:3])
    if covered != rotary_dims(config):
        raise Qwen35Unsupported(
            f"{model_type} with mrope_section covering {covered} of its {rotary_dims(config)} rotary dimensions: "
            "llama.cpp leaves the rest unrotated for text, mlx_lm rotates them"
        )
    if config.get("attention_bias"):
        raise Qwen35Unsupported(f"{model_type} with attention_bias=True: llama.cpp's qwen35 reads no biases")
    if _experts(config) and config.get("norm_topk_prob") is False:
        raise Qwen35Unsupported(f"{model_type} with norm_topk_prob=False: llama.cpp always renormalizes the top-k")


def _tile_value_heads(data: np.ndarray, axis: int, config: Dict[str, Any], width: int) -> np.ndarray:
    """Value heads from grouped by key head (mlx_lm repeats each key head for its group) to tiled (llama.cpp
    broadcasts the key heads over the value heads in turn)."""
    key_heads = int(config["linear_num_key_heads"])
    per_key = int(config["linear_num_value_heads"]) // key_heads
    if per_key == 1:
        return data
    moved = np.moveaxis(data, axis, 0)
    tiled = moved.reshape(key_heads, per_key, width, *moved.shape[1:]).swapaxes(0, 1).reshape(moved.shape)
    return np.moveaxis(tiled, 0, axis)


def _tile_after_keys(data: np.ndarray, config: Dict[str, Any]) -> np.ndarray:
    """The query and key rows as they are, the value rows tiled: the fused projection's and convolution's layout."""
    keys = 2 * int(config["linear_num_key_heads"]) * int(config["linear_key_head_dim"])
    values = _tile_value_heads(data[keys:], 0, config, int(config["linear_value_head_dim"]))
    return np.concatenate([data[:keys], values], axis=0)


def split_weight(name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """One MLX weight as the llama.cpp tensor it becomes; names outside the delta-net are the shared ones."""
    if name.endswith(".mlp.shared_expert_gate.weight"):
        return [(name, data.reshape(-1), False)]  # llama.cpp reads the shared expert's gate as a vector
    if _LINEAR not in name:
        return split_common_weight(name, data, config)
    block = name.split(_LINEAR)[0].removeprefix("model.layers.")
    width = int(config["linear_value_head_dim"])
    if name.endswith(".conv1d.weight"):  # (channels, kernel, 1) to llama.cpp's 2-D kernel
        return [(name, _tile_after_keys(data.reshape(data.shape[0], -1), config), False)]
    if name.endswith(".in_proj_qkv.weight"):
        return [(name, _tile_after_keys(data, config), False)]
    if name.endswith(".in_proj_z.weight"):
        return [(name, _tile_value_heads(data, 0, config, width), False)]
    if name.endswith((".in_proj_a.weight", ".in_proj_b.weight")):
        return [(name, _tile_value_heads(data, 0, config, 1), False)]
    if name.endswith(".out_proj.weight"):
        return [(name, _tile_value_heads(data, 1, config, width), False)]
    if name.endswith(".A_log"):  # llama.cpp stores the decay rate A itself
        return [(f"blk.{block}.ssm_a", _tile_value_heads(-np.exp(data), 0, config, 1), True)]
    if name.endswith(".dt_bias"):
        return [(f"blk.{block}.ssm_dt.bias", _tile_value_heads(data, 0, config, 1), True)]
    return [(name, data, False)]  # the gated norm, one per head size, shared by every head


def write_hyperparameters(writer: Any, config: Dict[str, Any]) -> None:
    """Every `qwen35.*` / `qwen35moe.*` key llama.cpp's loader reads."""
    dims = _head_dim(config)
    parameters = rope(config)
    writer.add_context_length(int(config.get("max_position_embeddings") or 131072))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    if not _experts(config) or config.get("intermediate_size"):
        writer.add_feed_forward_length(int(config.get("intermediate_size") or 14336))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or 8))
    writer.add_key_length(dims)
    writer.add_value_length(dims)
    writer.add_rope_dimension_count(rotary_dims(config))
    writer.add_rope_dimension_sections(rope_sections(config))
    writer.add_rope_freq_base(float(parameters.get("rope_theta", 100000.0)))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps") or 1e-6))
    writer.add_ssm_conv_kernel(int(config.get("linear_conv_kernel_dim") or 4))
    writer.add_ssm_state_size(int(config["linear_key_head_dim"]))
    writer.add_ssm_group_count(int(config["linear_num_key_heads"]))
    writer.add_ssm_time_step_rank(int(config["linear_num_value_heads"]))  # llama.cpp reads the value heads here
    writer.add_ssm_inner_size(int(config["linear_value_head_dim"]) * int(config["linear_num_value_heads"]))
    writer.add_full_attention_interval(int(config.get("full_attention_interval") or 4))
    if _experts(config):
        writer.add_expert_count(_experts(config))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))


class Qwen35(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        refusing(refuse_unsupported, Qwen35Unsupported, config)

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return split_weight(name, data, config)

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        write_hyperparameters(writer, config)  # delta-net, rope sections and experts: keys of its own


def _split_qkvz(name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
    """Qwen3-Next's fused projection, per key head [q, k, v, z], as llama.cpp's two: all q, k and v rows (its
    convolution's channels) and the z gate rows, value heads left grouped by key head as llama.cpp's qwen3next reads
    them."""
    key_heads, key_dim = int(config["linear_num_key_heads"]), int(config["linear_key_head_dim"])
    value_rows = int(config["linear_num_value_heads"]) // key_heads * int(config["linear_value_head_dim"])
    grouped = data.reshape(key_heads, 2 * key_dim + 2 * value_rows, -1)
    q, k, v, z = np.split(grouped, [key_dim, 2 * key_dim, 2 * key_dim + value_rows], axis=1)
    width = data.shape[-1]
    fused = np.concatenate([part.reshape(-1, width) for part in (q, k, v)], axis=0)
    block = name.split(_LINEAR)[0].removeprefix("model.layers.")
    return [
        (f"blk.{block}.attn_qkv.weight", fused, True),
        (f"blk.{block}.attn_gate.weight", z.reshape(-1, width), True),
    ]


class Qwen3Next(Converter):
    """Gated delta-net blocks with a gated full-attention block every `full_attention_interval`-th layer, experts
    with a sigmoid-gated shared expert in every layer; the stored norms already hold `1 + weight`, as mlx_lm's do."""

    def refuse(self, config: Dict[str, Any]) -> None:
        key_dim, value_dim = int(config["linear_key_head_dim"]), int(config["linear_value_head_dim"])
        if key_dim != value_dim:
            raise UnsupportedModel(
                f"qwen3_next with linear_key_head_dim {key_dim} != linear_value_head_dim {value_dim}: llama.cpp's "
                "qwen3next reads one head size (ssm.state_size) for both"
            )
        if not _experts(config) or config.get("mlp_only_layers") or int(config.get("decoder_sparse_step") or 1) != 1:
            raise UnsupportedModel(
                "qwen3_next with a dense MLP in some layer (num_experts 0, mlp_only_layers or decoder_sparse_step > 1):"
                " llama.cpp's qwen3next loads experts in every layer"
            )
        if not config.get("norm_topk_prob"):
            raise UnsupportedModel("qwen3_next with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if config.get("attention_bias"):
            raise UnsupportedModel("qwen3_next with attention_bias=True: llama.cpp's qwen3next reads no biases")
        scaling = scaling_of(config) or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind != "default":
            raise UnsupportedModel(f"qwen3_next with rope type {kind!r}: only the plain rope is checked here")

    def rope_scaling(self, config: Dict[str, Any]) -> None:
        return None  # refused above unless plain

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".in_proj_qkvz.weight"):
            return _split_qkvz(name, data, config)
        block = name.split(_LINEAR)[0].removeprefix("model.layers.")
        if name.endswith(".linear_attn.A_log"):  # llama.cpp stores the decay rate A itself
            return [(f"blk.{block}.ssm_a", -np.exp(data), True)]
        if name.endswith(".linear_attn.dt_bias"):
            return [(f"blk.{block}.ssm_dt.bias", data, True)]
        if name.endswith(".linear_attn.conv1d.weight"):  # (channels, kernel, 1) to llama.cpp's 2-D kernel
            return [(name, data.reshape(data.shape[0], -1), False)]
        if name.endswith(".mlp.shared_expert_gate.weight"):
            return [(name, data.reshape(-1), False)]  # llama.cpp reads the shared expert's gate as a vector
        return split_common_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))
        writer.add_ssm_conv_kernel(int(config.get("linear_conv_kernel_dim") or 4))
        writer.add_ssm_state_size(int(config["linear_key_head_dim"]))
        writer.add_ssm_group_count(int(config["linear_num_key_heads"]))
        writer.add_ssm_time_step_rank(int(config["linear_num_value_heads"]))  # llama.cpp reads the value heads here
        writer.add_ssm_inner_size(int(config["linear_value_head_dim"]) * int(config["linear_num_value_heads"]))
        writer.add_full_attention_interval(int(config.get("full_attention_interval") or 4))


# Kimi Linear's delta-net weights by their mlx_lm name after `self_attn.`, as llama.cpp's kimi-linear names them.
_KDA_NAMES = {
    "q_conv.conv.weight": "ssm_conv1d_q.weight",
    "k_conv.conv.weight": "ssm_conv1d_k.weight",
    "v_conv.conv.weight": "ssm_conv1d_v.weight",
    "f_a_proj.weight": "ssm_f_a.weight",
    "f_b_proj.weight": "ssm_f_b.weight",
    "b_proj.weight": "ssm_beta.weight",
    "g_a_proj.weight": "ssm_g_a.weight",
    "g_b_proj.weight": "ssm_g_b.weight",
    "dt_bias": "ssm_dt.bias",
    "o_norm.weight": "ssm_norm.weight",
}
_KIMI_LAYER = re.compile(r"^model\.layers\.(\d+)\.(?:self_attn|mlp)\.(.+)$")


class KimiLinear(Converter):
    """Kimi Linear: Kimi delta-attention layers (a short convolution over each of the query, key and value, a decay per
    channel, a sigmoid-gated output norm) between latent-attention layers without rotary embeddings (as DeepSeek's,
    one shared key/value head as wide as the latent), then experts beside shared ones after dense leading layers."""

    def refuse(self, config: Dict[str, Any]) -> None:
        linear = config["linear_attn_config"]
        if int(linear["num_heads"]) != int(config["num_attention_heads"]):
            raise UnsupportedModel(
                "kimi_linear with linear_attn_config.num_heads apart from num_attention_heads: llama.cpp's "
                "kimi-linear reads one head count for both kinds of layer"
            )
        if not int(config.get("num_experts") or 0) or not int(config.get("num_shared_experts") or 0):
            raise UnsupportedModel("kimi_linear without routed and shared experts: llama.cpp's kimi-linear needs both")
        if int(config.get("moe_layer_freq", 1)) != 1:
            raise UnsupportedModel(
                "kimi_linear with moe_layer_freq other than 1: llama.cpp's kimi-linear reads only leading dense layers"
            )
        if not config.get("moe_renormalize", True) or int(config.get("num_experts_per_token", 1)) == 1:
            raise UnsupportedModel(
                "kimi_linear with its top-k weights not renormalized (moe_renormalize off or one expert per token): "
                "llama.cpp's kimi-linear always renormalizes them"
            )
        groups = int(config.get("num_expert_group", 1))
        if config.get("use_grouped_topk", True) and groups > 1 and int(config.get("topk_group", 1)) < groups:
            raise UnsupportedModel("kimi_linear choosing experts within groups: llama.cpp's kimi-linear reads none")

    def attention_layers(self, config: Dict[str, Any]) -> List[bool]:
        kda = set(config["linear_attn_config"]["kda_layers"])
        return [layer + 1 not in kda for layer in range(int(config["num_hidden_layers"]))]

    def kv_head_counts(self, config: Dict[str, Any]) -> List[int]:
        return [1 if attends else 0 for attends in self.attention_layers(config)]  # the latent is one shared head

    def rope_scaling(self, config: Dict[str, Any]) -> None:
        return None  # mlx_lm's latent attention here rotates nothing, as llama.cpp's kimi-linear

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return int(config.get("qk_rope_head_dim") or 0)

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        latent, rotated = int(config["kv_lora_rank"]), self.rotary_dims(config)
        super().write_hyperparameters(writer, {**config, "head_dim": latent + rotated})  # key_length: latent + rotated

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        rotated, linear = self.rotary_dims(config), config["linear_attn_config"]
        writer.add_kv_lora_rank(int(config["kv_lora_rank"]))
        writer.add_key_length_mla(int(config["qk_nope_head_dim"]) + rotated)
        writer.add_value_length_mla(int(config["v_head_dim"]))
        writer.add_ssm_conv_kernel(int(linear.get("short_conv_kernel_size", 4)))
        writer.add_kda_head_dim(int(linear["head_dim"]))
        writer.add_expert_count(int(config["num_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_token"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config["num_shared_experts"]))
        writer.add_leading_dense_block_count(int(config.get("first_k_dense_replace", 0)))
        writer.add_expert_weights_scale(float(config.get("routed_scaling_factor", 1.0)))
        softmax = config.get("moe_router_activation_func", "sigmoid") == "softmax"
        writer.add_expert_gating_func(
            gguf.ExpertGatingFuncType.SOFTMAX if softmax else gguf.ExpertGatingFuncType.SIGMOID
        )

    def value_dims(self, config: Dict[str, Any]) -> int:
        return int(config["kv_lora_rank"])

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        from .latent_attention import split_weight as split_latent

        latent = split_latent(name, data, config)
        if latent is not None:
            return latent
        match = _KIMI_LAYER.match(name)
        if match is not None:
            layer, rest = match.groups()
            if rest in _KDA_NAMES:
                if rest.endswith("conv.weight"):
                    data = data.reshape(
                        data.shape[0], 1, -1
                    )  # (channels, kernel, 1) to llama.cpp's {kernel, 1, channels}
                return [(f"blk.{layer}.{_KDA_NAMES[rest]}", data, True)]
            if rest == "A_log":
                return [(f"blk.{layer}.ssm_a", -np.exp(data).reshape(-1, 1), True)]  # llama.cpp stores A itself
            if rest == "e_score_correction_bias":
                return [(f"blk.{layer}.exp_probs_b.bias", data, True)]
        return split_common_weight(name, data, config)


CONVERTERS = {
    "qwen3_5_text": Qwen35(Family("qwen35")),
    "qwen3_5_moe_text": Qwen35(Family("qwen35moe", key="QWEN35MOE")),
    "qwen3_next": Qwen3Next(Family("qwen3next")),
    "kimi_linear": KimiLinear(Family("kimi-linear", key="KIMI_LINEAR", output_required=True)),
}
