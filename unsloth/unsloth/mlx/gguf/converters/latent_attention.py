# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Multi-head latent attention (GLM-4.7-Flash, DeepSeek V2 and V3) as llama.cpp's deepseek2, and GLM-5's with its
indexer as glm-dsa: tensors, keys, refusals.

Keys and values come from one small latent per token; each head's key part without rotation and its value are
per-head matrices over that latent (mlx_lm's `embed_q` and `unembed_out`, llama.cpp's `attn_k_b` and `attn_v_b`),
so llama.cpp runs it as one shared key/value head as wide as the latent plus the rotated part. Shapes and keys follow
llama.cpp's loader (`src/models/deepseek2.cpp`, llama-cpp-python 0.3.36); routing follows what mlx_lm computes.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..families import Family, UnsupportedModel
from .base import Converter, refusing

# The model types written this way: each one's mlx_lm routing, as llama.cpp's gating function names it (Kimi K2 and
# JoyAI-LLM-Flash are DeepSeek V3 to mlx_lm, by its MODEL_REMAPPING).
LATENT_TYPES = {
    "glm4_moe_lite": "sigmoid",
    "deepseek_v3": "sigmoid",
    "deepseek_v2": "softmax",
    "kimi_k2": "sigmoid",
    "joyai_llm_flash": "sigmoid",
    "glm_moe_dsa": "sigmoid",
}
# mlx_lm's DSA indexer weights (GLM-5), under llama.cpp's glm-dsa names.
_INDEXER = {"wq_b": "attn_q_b", "wk": "attn_k", "weights_proj": "proj", "k_norm": "k_norm"}
_INDEXER_TENSOR = re.compile(
    r"^model\.layers\.(\d+)\.self_attn\.indexer\.(wq_b|wk|weights_proj|k_norm)\.(weight|bias)$"
)
# From this trained context on, llama.cpp's glm-dsa shares GLM-5.2's indexers between layers unless told otherwise.
_GLM_DSA_SHARED_INDEXERS = 1048576
# mlx_lm's per-head latent matrices, (heads, out, in) as llama.cpp's (in, out, heads) reads them.
_PER_HEAD = {"embed_q": "attn_k_b", "unembed_out": "attn_v_b"}
_LAYER_TENSOR = re.compile(r"^model\.layers\.(\d+)\.self_attn\.(embed_q|unembed_out|kv_b_proj)\.weight$")


class LatentAttentionUnsupported(NotImplementedError):
    """A latent-attention setting llama.cpp's deepseek2 graph does not reproduce as mlx_lm runs it."""


def as_mlx_lm_reads(config: Dict[str, Any]) -> Dict[str, Any]:
    """The config with mlx_lm's `ModelArgs` defaults for the keys it leaves out, as the trained model ran, under the
    model type mlx_lm runs it as."""
    import dataclasses
    import importlib

    from mlx_lm.utils import MODEL_REMAPPING

    model_type = MODEL_REMAPPING.get(config["model_type"], config["model_type"])
    config = {**config, "model_type": model_type}
    arguments = importlib.import_module(f"mlx_lm.models.{model_type}").ModelArgs
    defaults = {field.name: field.default for field in dataclasses.fields(arguments)}
    return {**{key: value for key, value in defaults.items() if value is not dataclasses.MISSING}, **config}


def _routed_experts(config: Dict[str, Any]) -> int:
    return int(config.get("n_routed_experts") or 0)


def _dense_leading(config: Dict[str, Any]) -> int:
    """Layers before the first expert layer; every layer when the model has no experts."""
    if not _routed_experts(config):
        return int(config["num_hidden_layers"])
    return int(config.get("first_k_dense_replace") or 0)


def refuse_unsupported(config: Dict[str, Any]) -> None:
    """Name each setting an exported file would not run as the MLX model did, before any work."""
    config = as_mlx_lm_reads(config)
    model_type = str(config.get("model_type"))
    if config.get("attention_bias"):
        raise LatentAttentionUnsupported(f"{model_type} with attention_bias=True: llama.cpp's deepseek2 has no biases")
    if _routed_experts(config):
        _refuse_routing(config, model_type)
    if (
        model_type in ("deepseek_v2", "deepseek_v3", "glm_moe_dsa")
        and float(config.get("rms_norm_eps") or 1e-6) != 1e-6
    ):
        raise LatentAttentionUnsupported(
            f"{model_type} with rms_norm_eps {config['rms_norm_eps']!r}: mlx_lm norms its query and latent with 1e-6 "
            "whatever the config says, llama.cpp with the config's epsilon"
        )
    scaling = yarn_scaling(config)
    if scaling is not None:
        mscale_all_dim = float(scaling.get("mscale_all_dim") or 0.0)
        if not mscale_all_dim or float(scaling.get("mscale", 1.0)) != mscale_all_dim:
            raise LatentAttentionUnsupported(
                f"{model_type} YaRN with mscale={scaling.get('mscale', 1.0)!r} and mscale_all_dim="
                f"{scaling.get('mscale_all_dim')!r}: llama.cpp's deepseek2 scales attention as mlx_lm does only when "
                "the two are equal"
            )
        for key in ("attention_factor", "attn_factor", "extrapolation_factor"):
            if scaling.get(key) not in (None, 1.0):
                raise LatentAttentionUnsupported(f"{model_type} YaRN with {key}: llama.cpp's deepseek2 reads it apart")


def yarn_scaling(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The YaRN settings mlx_lm applies, None when it applies none; another scaling is refused by name."""
    scaling = dict(config.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if config.get("model_type") == "deepseek_v2":
        kind = "yarn"  # mlx_lm's deepseek_v2 builds its YaRN rope whatever the type says
    if kind not in ("default", "yarn", "deepseek_yarn"):
        raise LatentAttentionUnsupported(
            f"{config.get('model_type')} with rope_scaling of type {kind!r}: only YaRN is written for deepseek2 here"
        )
    return scaling if kind != "default" and float(scaling.get("factor", 1.0)) > 1.0 else None


def _refuse_routing(config: Dict[str, Any], model_type: str) -> None:
    if int(config.get("moe_layer_freq") or 1) != 1:
        raise LatentAttentionUnsupported(
            f"{model_type} with moe_layer_freq other than 1: llama.cpp's deepseek2 puts experts in every layer after "
            "the dense leading ones"
        )
    if not config.get("n_shared_experts"):
        raise LatentAttentionUnsupported(f"{model_type} without shared experts: llama.cpp's deepseek2 requires them")
    groups = int(config.get("n_group") or 1)
    gating = LATENT_TYPES[model_type]
    if groups > 1 and _routed_experts(config) % groups:
        raise LatentAttentionUnsupported(
            f"{model_type} with {_routed_experts(config)} experts in {groups} groups: llama.cpp's groups are equal"
        )
    if gating == "sigmoid":
        if config.get("scoring_func", "sigmoid") != "sigmoid":
            raise LatentAttentionUnsupported(f"{model_type} with scoring_func other than sigmoid: mlx_lm routes by it")
        if config.get("topk_method", "noaux_tc") != "noaux_tc":
            raise LatentAttentionUnsupported(f"{model_type} with topk_method other than noaux_tc: mlx_lm asserts it")
        if config.get("norm_topk_prob") and int(config["num_experts_per_tok"]) == 1:
            raise LatentAttentionUnsupported(
                f"{model_type} with norm_topk_prob and one expert per token: mlx_lm skips the normalisation, "
                "llama.cpp does not"
            )
    elif config.get("topk_method", "greedy") != "greedy":
        raise LatentAttentionUnsupported(
            f"{model_type} with topk_method {config.get('topk_method')!r}: only greedy selection is checked here"
        )


def split_weight(name: str, data: np.ndarray, config: Dict[str, Any]) -> Optional[List[Tuple[str, np.ndarray, bool]]]:
    """The llama.cpp tensors of one latent-attention weight, or None for a weight that is not one."""
    match = _LAYER_TENSOR.match(name)
    if match is None:
        return None
    layer, part = match.groups()
    if part in _PER_HEAD:
        return [(f"blk.{layer}.{_PER_HEAD[part]}.weight", data, True)]
    # An unsplit kv_b_proj (mlx_lm's deepseek_v2): per head, the key rows then the value rows, over the latent.
    heads, nope = int(config["num_attention_heads"]), int(config["qk_nope_head_dim"])
    per_head = data.reshape(heads, nope + int(config["v_head_dim"]), data.shape[-1])
    keys = np.ascontiguousarray(per_head[:, :nope, :].swapaxes(1, 2))
    values = np.ascontiguousarray(per_head[:, nope:, :])
    return [(f"blk.{layer}.attn_k_b.weight", keys, True), (f"blk.{layer}.attn_v_b.weight", values, True)]


def write_hyperparameters(writer: Any, config: Dict[str, Any]) -> None:
    """Every `deepseek2.*` key llama.cpp's loader reads, with the latent as the one key/value head's width."""
    import gguf

    config = as_mlx_lm_reads(config)
    model_type = str(config["model_type"])
    latent, rotated = int(config["kv_lora_rank"]), int(config["qk_rope_head_dim"])
    writer.add_context_length(int(config.get("max_position_embeddings") or 4096))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(1)
    writer.add_key_length(latent + rotated)
    writer.add_value_length(latent)
    writer.add_key_length_mla(int(config["qk_nope_head_dim"]) + rotated)
    writer.add_value_length_mla(int(config["v_head_dim"]))
    writer.add_rope_dimension_count(rotated)
    writer.add_rope_freq_base(float(config.get("rope_theta") or 10000.0))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps") or 1e-6))
    writer.add_vocab_size(int(config["vocab_size"]))
    writer.add_q_lora_rank(int(config.get("q_lora_rank") or 0))  # 0: one plain query matrix
    writer.add_kv_lora_rank(latent)
    writer.add_leading_dense_block_count(_dense_leading(config))
    writer.add_expert_feed_forward_length(int(config.get("moe_intermediate_size") or config["intermediate_size"]))
    writer.add_expert_shared_count(int(config.get("n_shared_experts") or 0))
    if _routed_experts(config):
        writer.add_expert_count(_routed_experts(config))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_weights_scale(float(config.get("routed_scaling_factor") or 1.0))
        sigmoid = LATENT_TYPES[model_type] == "sigmoid"
        writer.add_expert_weights_norm(bool(sigmoid and config.get("norm_topk_prob")))  # mlx_lm's V2 never renormalises
        kind = gguf.ExpertGatingFuncType.SIGMOID if sigmoid else gguf.ExpertGatingFuncType.SOFTMAX
        writer.add_expert_gating_func(kind)
        if sigmoid and int(config.get("n_group") or 1) > 1:  # the groups whose best two experts score most stay
            writer.add_expert_group_count(int(config["n_group"]))
            writer.add_expert_group_used_count(int(config.get("topk_group") or 1))
    _write_yarn(writer, config)


def _write_yarn(writer: Any, config: Dict[str, Any]) -> None:
    import gguf

    scaling = yarn_scaling(config)
    if scaling is None:
        return
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(float(scaling["factor"]))
    writer.add_rope_scaling_orig_ctx_len(int(scaling.get("original_max_position_embeddings") or 4096))
    writer.add_rope_scaling_yarn_beta_fast(float(scaling.get("beta_fast", 32.0)))
    writer.add_rope_scaling_yarn_beta_slow(float(scaling.get("beta_slow", 1.0)))
    # llama.cpp's deepseek2 divides this key by 0.1, as its converter multiplies it.
    writer.add_rope_scaling_yarn_log_mul(0.1 * float(scaling["mscale_all_dim"]))


class LatentAttention(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        refusing(refuse_unsupported, LatentAttentionUnsupported, config)

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Tuple[str, np.ndarray, bool]]:
        own = split_weight(name, data, config)
        return super().split_weight(name, data, config) if own is None else own

    def rope_tensors(self, config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {}  # its YaRN is checked and written by write_hyperparameters

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        write_hyperparameters(writer, config)


class GlmDsa(LatentAttention):
    """GLM-5 (glm_moe_dsa) as llama.cpp's glm-dsa: DeepSeek V3's latent attention and experts, with a lightning
    indexer in every layer that keeps each query's `index_topk` best-scored keys once the context is longer."""

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        parameters = config.get("rope_parameters") or {}
        return {**config, "rope_theta": parameters.get("rope_theta"), "rope_scaling": parameters or None}  # as mlx_lm

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if not config.get("indexer_rope_interleave", True):
            raise UnsupportedModel(
                "glm_moe_dsa with indexer_rope_interleave=False: llama.cpp's glm-dsa rotates the indexer's pairs "
                "interleaved"
            )
        if int(config["index_head_dim"]) % 64:
            raise UnsupportedModel(
                f"glm_moe_dsa with index_head_dim {config['index_head_dim']}: llama.cpp's glm-dsa turns the indexer's "
                "queries and keys by a Hadamard matrix of a multiple of 64 rows, and stops (ggml_can_mul_mat) on this"
            )
        if int(config["max_position_embeddings"]) >= _GLM_DSA_SHARED_INDEXERS:
            raise UnsupportedModel(
                f"glm_moe_dsa with max_position_embeddings {config['max_position_embeddings']}: from "
                f"{_GLM_DSA_SHARED_INDEXERS} llama.cpp's glm-dsa shares GLM-5.2's indexers between layers, mlx_lm "
                "runs one in every layer"
            )

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Tuple[str, np.ndarray, bool]]:
        match = _INDEXER_TENSOR.match(name)
        if match is not None:
            layer, part, kind = match.groups()
            return [(f"blk.{layer}.indexer.{_INDEXER[part]}.{kind}", data, True)]
        return super().split_weight(name, data, config)

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        super().write_hyperparameters(writer, config)
        writer.add_indexer_head_count(int(config["index_n_heads"]))
        writer.add_indexer_key_length(int(config["index_head_dim"]))
        writer.add_indexer_top_k(int(config["index_topk"]))


# YaRN only as DeepSeek's log multiplier makes it agree.
CONVERTERS = {
    model_type: LatentAttention(Family("deepseek2", yarn=True, yarn_log_mul=True))
    for model_type in LATENT_TYPES
    if model_type != "glm_moe_dsa"
}
CONVERTERS["glm_moe_dsa"] = GlmDsa(Family("glm-dsa", key="GLM_DSA", yarn=True, yarn_log_mul=True))
