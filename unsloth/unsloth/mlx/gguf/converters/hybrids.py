# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""LFM2 and Granite: attention beside recurrent blocks, as llama.cpp's lfm2, lfm2moe, granite, granitemoe and
granitehybrid read them.

LFM2 runs short convolutions between attention blocks, dense or with sigmoid-routed experts; Granite 4.0-H runs
Mamba 2 between attention blocks, dense or with experts beside a shared MLP, and Granite 3 is its dense
all-attention ancestor with the same four multipliers.
"""

from __future__ import annotations

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


CONVERTERS = {
    "lfm2": Lfm2(Family("lfm2")),
    "lfm2_moe": Lfm2Moe(Family("lfm2moe", key="LFM2MOE")),
    "granite": Granite(Family("granite", permute_rotary=True)),
    "granitemoe": Granite(_GRANITE_4_ATTENTION_ONLY[True]),  # Granite 3 MoE: the same graph as Granite 4.0's
    "granitemoehybrid": GraniteHybrid(Family("granitehybrid", permute_rotary=True, key="GRANITE_HYBRID")),
}
