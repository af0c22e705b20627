# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""LFM2 and Granite: attention beside recurrent blocks, as llama.cpp's lfm2, lfm2moe, granite, granitemoe and
granitehybrid read them.

LFM2 runs short convolutions between attention blocks, dense or with sigmoid-routed experts; Granite 4.0-H runs
Mamba 2 between attention blocks, dense or with experts beside a shared MLP, and Granite 3 is its dense
all-attention ancestor with the same four multipliers. RWKV-7, all recurrent, goes as llama.cpp's rwkv7.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Union

import numpy as np

from ..families import Family, UnsupportedModel
from .architectures import Piece, blk, has_experts, ssm_inner_size
from .base import Converter


class Lfm2(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("conv_bias"):
            raise UnsupportedModel(
                f"{config['model_type']} with conv_bias=True: llama.cpp's LFM2 has no convolution biases"
            )

    def attention_layers(self, config: Dict[str, Any]) -> Optional[List[bool]]:
        indices = config.get("full_attn_idxs")
        if indices is None:
            indices = [i for i, kind in enumerate(config["layer_types"]) if kind == "full_attention"]
        return [layer in set(indices) for layer in range(int(config["num_hidden_layers"]))]

    def feed_forward_length(self, config: Dict[str, Any]) -> Union[int, List[int]]:
        """LFM2's `block_ff_dim`, shrunk and rounded as its config asks."""
        width = int(config.get("block_ff_dim") or config["intermediate_size"])
        if config.get("block_auto_adjust_ff_dim"):
            width = int(2 * width / 3)
            if config.get("block_ffn_dim_multiplier") is not None:
                width = int(float(config["block_ffn_dim_multiplier"]) * width)
            multiple = int(config["block_multiple_of"])
            width = multiple * ((width + multiple - 1) // multiple)
        return width

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_shortconv_l_cache(int(config["conv_L_cache"]))
        writer.add_vocab_size(int(config["vocab_size"]))


class Lfm2Moe(Lfm2):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if config.get("norm_topk_prob") is False:
            raise UnsupportedModel("lfm2_moe with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if float(config.get("routed_scaling_factor") or 1.0) != 1.0:
            raise UnsupportedModel(
                "lfm2_moe with routed_scaling_factor other than 1: llama.cpp's LFM2 MoE reads no scale"
            )

    def feed_forward_length(self, config: Dict[str, Any]) -> Union[int, List[int]]:
        return int(config["intermediate_size"])

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if not name.endswith(".feed_forward.gate.weight"):
            return super().split_weight(name, data, config)
        pieces = [(name, data, False)]
        if not config.get("use_expert_bias"):  # llama.cpp's LFM2 MoE requires a selection bias: none is zeros
            pieces.append((blk(name, "exp_probs_b.bias"), np.zeros(data.shape[0], dtype=np.float32), True))
        return pieces

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_leading_dense_block_count(int(config.get("num_dense_layers") or 0))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


class Granite(Converter):
    """Granite 3: llama's graph scaled by four multipliers."""

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        _write_granite_multipliers(writer, config)
        if family.architecture != "granitemoe":  # these graphs rotate only when this flag is set; granitemoe always
            writer.add_rope_scaling_finetuned(config.get("position_embedding_type", "rope") != "nope")


# Granite 4.0's all-attention models (no Mamba layer), as llama.cpp's converter writes them.
_GRANITE_4_ATTENTION_ONLY = {
    False: Family("granite", permute_rotary=True),
    True: Family("granitemoe", permute_rotary=True, key="GRANITE_MOE"),
}


class GraniteHybrid(Granite):
    """Granite 4.0: Mamba 2 layers among attention ones, or attention alone (then granite or granitemoe)."""

    @staticmethod
    def _attention_only(config: Dict[str, Any]) -> bool:
        return "mamba" not in config.get("layer_types", ["mamba"])

    def family_for(self, config: Dict[str, Any]) -> Family:
        if self._attention_only(config):
            return _GRANITE_4_ATTENTION_ONLY[has_experts(config)]
        return self.family

    def refuse(self, config: Dict[str, Any]) -> None:
        if self._attention_only(config) and has_experts(config) and config.get("position_embedding_type") == "nope":
            raise UnsupportedModel(
                "granitemoehybrid with experts, no Mamba layer and position_embedding_type='nope': "
                "llama.cpp's granitemoe always applies rotary embeddings"
            )

    def attention_layers(self, config: Dict[str, Any]) -> Optional[List[bool]]:
        return [kind == "attention" for kind in config["layer_types"]]

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        if config.get("shared_intermediate_size") and has_experts(config) and family.architecture != "granite":
            writer.add_expert_shared_feed_forward_length(int(config["shared_intermediate_size"]))
        if family.architecture == "granitehybrid":
            writer.add_ssm_conv_kernel(int(config["mamba_d_conv"]))
            writer.add_ssm_state_size(int(config["mamba_d_state"]))
            writer.add_ssm_group_count(int(config.get("mamba_n_groups") or 1))
            writer.add_ssm_inner_size(ssm_inner_size(config))
            writer.add_ssm_time_step_rank(int(config["mamba_n_heads"]))  # llama.cpp reads the SSM head count here


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


# RWKV-7's weights by their mlx_lm name after the layer (`model.layers.N.`), as llama.cpp's rwkv7 names them.
_RWKV7_NAMES = {
    "attn_norm.weight": "attn_norm.weight",
    "attn_norm.bias": "attn_norm.bias",
    "ffn_norm.weight": "attn_norm_2.weight",
    "ffn_norm.bias": "attn_norm_2.bias",
    "attn.r_proj.weight": "time_mix_receptance.weight",
    "attn.k_proj.weight": "time_mix_key.weight",
    "attn.v_proj.weight": "time_mix_value.weight",
    "attn.o_proj.weight": "time_mix_output.weight",
    "attn.k_k": "time_mix_k_k.weight",
    "attn.k_a": "time_mix_k_a.weight",
    "attn.r_k": "time_mix_r_k.weight",
    "attn.g_norm.weight": "time_mix_ln.weight",
    "attn.g_norm.bias": "time_mix_ln.bias",
    "ffn.key.weight": "channel_mix_key.weight",
    "ffn.value.weight": "channel_mix_value.weight",
    "ffn.x_k": "channel_mix_lerp_k.weight",
}
_RWKV7_PER_CHANNEL = {"attn.k_k", "attn.k_a", "attn.r_k", "attn.g_norm.weight", "attn.g_norm.bias", "ffn.x_k"}
_RWKV7_OUTER = {
    "model.embeddings.weight": "token_embd.weight",
    "model.layers.0.pre_norm.weight": "token_embd_norm.weight",
    "model.layers.0.pre_norm.bias": "token_embd_norm.bias",
    "model.norm.weight": "output_norm.weight",
    "model.norm.bias": "output_norm.bias",
    "lm_head.weight": "output.weight",
}
# Each low-rank projection (decay w, in-context learning rate a, value mix v, gate g) as llama.cpp's 1, 2 and 0.
_RWKV7_LORA = {"lora.0.weight": "1.weight", "lora.2.weight": "2.weight", "lora.2.bias": "0.weight"}
# The token-shift mixes in the order llama.cpp's fused tensor holds them.
_RWKV7_MIXES = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")
_RWKV7_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


class Rwkv7(Converter):
    """RWKV-7: per layer, time mixing (token-shift mixes, low-rank decay, learning rate, value-residual and gate
    projections, the wkv7 state, a per-head group norm) and channel mixing under LayerNorms, the first layer's input
    normed as well; no attention, so llama.cpp counts no heads."""

    embedding_weight = "model.embeddings.weight"

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {**config, "num_attention_heads": 0}

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """The six token-shift mixes of each layer fused, and the first layer's unused value-mix projection, which
        llama.cpp's loader requires, as zeros."""
        weights = dict(weights)
        hidden, rank = int(config["hidden_size"]), int(config["a_low_rank_dim"])
        for layer in range(int(config["num_hidden_layers"])):
            prefix = f"model.layers.{layer}.attn."
            mixes = [np.asarray(weights.pop(prefix + mix), dtype=np.float32).reshape(-1) for mix in _RWKV7_MIXES]
            weights[f"blk.{layer}.time_mix_lerp_fused.weight"] = np.stack(mixes).reshape(len(mixes), 1, 1, hidden)
        zeros = {"lora.0.weight": (rank, hidden), "lora.2.weight": (hidden, rank), "lora.2.bias": (hidden,)}
        for part, shape in zeros.items():
            weights.setdefault(f"model.layers.0.attn.v_lora.{part}", np.zeros(shape, dtype=np.float32))
        return weights

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.startswith("blk.") or name in _RWKV7_OUTER:
            return [(_RWKV7_OUTER.get(name, name), data, True)]
        match = _RWKV7_LAYER.match(name)
        if match is None:
            return super().split_weight(name, data, config)
        layer, rest = match.groups()
        if rest in _RWKV7_NAMES:
            flat = rest in _RWKV7_PER_CHANNEL  # (heads, head_dim) or (1, 1, hidden) as llama.cpp's one row
            return [(f"blk.{layer}.{_RWKV7_NAMES[rest]}", data.reshape(-1) if flat else data, True)]
        kind, _, part = rest.removeprefix("attn.").partition("_lora.")
        return [(f"blk.{layer}.time_mix_{kind}{_RWKV7_LORA[part]}", data, True)]

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        writer.add_context_length(1048576)  # RWKV keeps a state, not a context window
        writer.add_embedding_length(int(config["hidden_size"]))
        writer.add_block_count(int(config["num_hidden_layers"]))
        writer.add_layer_norm_eps(float(config["norm_eps"]))
        writer.add_wkv_head_size(int(config["head_dim"]))
        writer.add_decay_lora_rank(int(config["decay_low_rank_dim"]))
        writer.add_iclr_lora_rank(int(config["a_low_rank_dim"]))
        writer.add_value_residual_mix_lora_rank(int(config["v_low_rank_dim"]))
        writer.add_gate_lora_rank(int(config["gate_low_rank_dim"]))
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_head_count(0)  # llama.cpp's loader requires the key


CONVERTERS = {
    "lfm2": Lfm2(Family("lfm2")),
    "lfm2_moe": Lfm2Moe(Family("lfm2moe", key="LFM2MOE")),
    "granite": Granite(Family("granite", permute_rotary=True)),
    "granitemoe": Granite(_GRANITE_4_ATTENTION_ONLY[True]),  # Granite 3 MoE: the same graph as Granite 4.0's
    "granitemoehybrid": GraniteHybrid(Family("granitehybrid", permute_rotary=True, key="GRANITE_HYBRID")),
    "rwkv7": Rwkv7(Family("rwkv7", output_required=True)),
}
