# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The mixture-of-experts families llama.cpp reads with the common tensor names: Qwen 2 and 3 MoE, OLMoE,
DeepSeek (v1), dots.llm1, Ling (bailing_moe), ERNIE 4.5, GLM-4.5, MiniMax-M2, gpt-oss, Llama 4's language model,
DBRX, K-EXAONE, AFMoE, MiMo-V2-Flash and Step 3.5, each with the expert keys and the routing settings its graph fixes."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..families import Family, UnsupportedModel
from .architectures import Piece, blk
from .base import Converter, head_dim, interleave_rotary_rows


class Qwen3Moe(Converter):
    yarn_refusal = (
        "mlx_lm's qwen3_moe builds a plain RoPE and ignores rope_scaling, so the model trained here never "
        "applied YaRN and llama.cpp would"
    )

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("norm_topk_prob") is False:
            raise UnsupportedModel("qwen3_moe with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if config.get("mlp_only_layers") or int(config.get("decoder_sparse_step") or 1) != 1:
            raise UnsupportedModel("qwen3_moe with dense layers (mlp_only_layers, decoder_sparse_step): not in GGUF")

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))


class NeverRenormalized(Converter):
    """OLMoE and Qwen 2 MoE: llama.cpp's graphs never renormalize the top-k weights."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("norm_topk_prob"):
            raise UnsupportedModel(
                f"{config['model_type']} with norm_topk_prob=True: llama.cpp's graph never renormalizes the top-k"
            )


class Olmoe(NeverRenormalized):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if config.get("num_key_value_heads") not in (None, config.get("num_attention_heads")):
            raise UnsupportedModel("olmoe with fewer key/value heads than query heads: llama.cpp's OLMoE has no GQA")


class Qwen2Moe(NeverRenormalized):
    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))


class Ernie45(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("use_bias"):
            raise UnsupportedModel(
                f"{config['model_type']} with use_bias=True: not checked against llama.cpp's ERNIE 4.5 here"
            )


class Ernie45Moe(Ernie45):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if config.get("moe_gate_act", "softmax") != "softmax":
            raise UnsupportedModel("ernie4_5_moe with moe_gate_act other than softmax: llama.cpp's routes by softmax")
        last = int(config["num_hidden_layers"]) - 1
        if config.get("moe_layer_end_index") is not None and config["moe_layer_end_index"] < last:
            raise UnsupportedModel("ernie4_5_moe with dense trailing layers (moe_layer_end_index): not in GGUF")

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        """ERNIE 4.5 MoE's experts: which layers hold them (after the dense leading ones, every interval-th) and
        their widths, the shared experts' as mlx_lm builds them (one MLP as wide as all of them)."""
        super().write_keys(writer, config, family)
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


class Glm4Moe(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        """GLM-4.5 routing settings llama.cpp's glm4moe graph does not reproduce."""
        if config.get("scoring_func", "sigmoid") != "sigmoid":
            raise UnsupportedModel(
                "glm4_moe with scoring_func other than sigmoid: llama.cpp's glm4moe routes by sigmoid"
            )
        if int(config.get("n_group") or 1) > 1 and int(config.get("topk_group") or 1) < int(config["n_group"]):
            raise UnsupportedModel(
                "glm4_moe choosing experts within topk_group of n_group groups: llama.cpp's glm4moe reads no groups"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        """GLM-4.5's routed experts (sigmoid scores, a selection bias, normalised then scaled) after dense leading
        layers, and its shared experts; the multi-token prediction layers mlx_lm drops are not written."""
        import gguf

        super().write_keys(writer, config, family)
        writer.add_expert_count(int(config["n_routed_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config.get("n_shared_experts") or 0))
        writer.add_leading_dense_block_count(int(config.get("first_k_dense_replace") or 0))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_expert_weights_scale(float(config.get("routed_scaling_factor") or 1.0))
        writer.add_expert_weights_norm(bool(config.get("norm_topk_prob")))


class DeepSeek(Converter):
    """DeepSeek (v1, DeepSeekMoE): softmax top-k experts, never renormalized, beside shared experts, after
    `first_k_dense_replace` dense layers; llama's interleaved rotary rows."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if not config.get("n_routed_experts"):
            raise UnsupportedModel("deepseek without routed experts: llama.cpp's deepseek requires them")
        if not config.get("n_shared_experts"):
            raise UnsupportedModel("deepseek without shared experts: llama.cpp's deepseek requires them")
        if int(config.get("moe_layer_freq") or 1) != 1:
            raise UnsupportedModel(
                "deepseek with moe_layer_freq other than 1: llama.cpp's deepseek reads only leading dense layers"
            )
        if config.get("attention_bias"):
            raise UnsupportedModel("deepseek with attention_bias=True: llama.cpp's deepseek reads no attention biases")
        if config.get("head_dim") not in (None, int(config["hidden_size"]) // int(config["num_attention_heads"])):
            raise UnsupportedModel("deepseek with a head_dim other than hidden_size / heads: mlx_lm ignores it")

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_count(int(config["n_routed_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config["n_shared_experts"]))
        writer.add_leading_dense_block_count(int(config.get("first_k_dense_replace") or 0))
        writer.add_expert_weights_scale(1.0)


class Dots1(Converter):
    """dots.llm1: sigmoid-scored experts picked with a selection bias, weighed by the unbiased scores (normalized, then
    scaled), beside shared experts, after dense leading layers; per-head query/key norms."""

    def refuse(self, config: Dict[str, Any]) -> None:
        groups = int(config.get("n_group") or 1)
        if groups > 1 and int(config.get("topk_group") or 1) < groups:
            raise UnsupportedModel(
                "dots1 choosing experts within topk_group of n_group groups: llama.cpp's dots1 reads no groups"
            )
        for key in ("attention_bias", "mlp_bias"):
            if config.get(key):
                raise UnsupportedModel(f"dots1 with {key}=True: llama.cpp's dots1 reads no such biases")
        if config.get("num_key_value_heads") not in (None, config["num_attention_heads"]):
            raise UnsupportedModel(
                "dots1 with fewer key/value heads than query heads: llama.cpp's dots1 sizes keys and values by the "
                "query heads"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        writer.add_expert_count(int(config["n_routed_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config["n_shared_experts"]))
        writer.add_leading_dense_block_count(int(config["first_k_dense_replace"]))
        writer.add_expert_weights_scale(float(config["routed_scaling_factor"]))
        writer.add_expert_weights_norm(bool(config["norm_topk_prob"]))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)  # mlx_lm's dots1 scores by sigmoid


# Ling settings mlx_lm can run and llama.cpp's bailingmoe graph cannot, with the value that graph fixes.
_BAILING_FIXED = {
    "score_function": "softmax",
    "moe_router_enable_expert_bias": False,
    "use_qk_norm": False,
    "use_bias": False,
    "use_qkv_bias": False,
    "first_k_dense_replace": 0,
    "moe_router_enable_shared_expert": True,
}


class BailingMoe(Converter):
    """Ling (bailing_moe v1): softmax experts in every layer beside shared ones, one query_key_value split into
    llama.cpp's attn_q / attn_k / attn_v with the query and key rows interleaved per head."""

    embedding_weight = "model.word_embeddings.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        for key, fixed in _BAILING_FIXED.items():
            if config.get(key, fixed) != fixed:
                raise UnsupportedModel(
                    f"bailing_moe with {key}={config[key]!r}: llama.cpp's bailingmoe graph runs only {fixed!r}"
                )
        if not int(config.get("num_shared_experts") or 0):
            raise UnsupportedModel("bailing_moe without shared experts: llama.cpp's bailingmoe requires them")
        if config.get("moe_shared_expert_intermediate_size") not in (None, config["moe_intermediate_size"]):
            raise UnsupportedModel(
                "bailing_moe with moe_shared_expert_intermediate_size apart from moe_intermediate_size: llama.cpp "
                "sizes the shared experts by the routed ones"
            )
        groups = int(config.get("n_group") or 1)
        if groups > 1 and int(config.get("topk_group") or 4) < groups:
            raise UnsupportedModel("bailing_moe choosing experts within groups: llama.cpp's bailingmoe reads none")
        rotated = config.get("rotary_dim") or int(head_dim(config) * float(config.get("partial_rotary_factor") or 1.0))
        if rotated != head_dim(config):
            raise UnsupportedModel("bailing_moe rotating part of each head: llama.cpp's bailingmoe rotates all of it")

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".attention.dense.weight"):
            return [(blk(name, "attn_output.weight"), data, True)]
        if name.endswith(".mlp.gate.gate_proj.weight"):
            return [(blk(name, "ffn_gate_inp.weight"), data, True)]
        if not name.endswith(".attention.query_key_value.weight"):
            return super().split_weight(name, data, config)
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        query, key, value = np.split(data, [heads * head_dim(config), (heads + kv_heads) * head_dim(config)])
        return [
            (blk(name, "attn_q.weight"), interleave_rotary_rows(query, heads), True),
            (blk(name, "attn_k.weight"), interleave_rotary_rows(key, kv_heads), True),
            (blk(name, "attn_v.weight"), value, True),
        ]

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        scaled = config.get("moe_router_enable_routed_scaling", True)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config["num_shared_experts"]))
        writer.add_leading_dense_block_count(0)
        writer.add_expert_weights_scale(float(config.get("routed_scaling_factor") or 1.0) if scaled else 1.0)
        writer.add_expert_weights_norm(bool(config["norm_topk_prob"]))


class MiniMaxM2(Converter):
    """MiniMax-M2 (mlx_lm's minimax): sigmoid-scored experts picked with a selection bias and renormalized, query and
    key norms over all heads at once, a rope over `rotary_dim` of each head."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("scoring_func", "sigmoid") != "sigmoid":
            raise UnsupportedModel("minimax_m2 with scoring_func other than sigmoid: mlx_lm's minimax routes by it")
        if config.get("use_qk_norm") is False:
            raise UnsupportedModel("minimax_m2 with use_qk_norm=False: llama.cpp's minimax-m2 requires the norms")

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return int(config["rotary_dim"])

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".block_sparse_moe.e_score_correction_bias"):
            return [(blk(name, "exp_probs_b.bias"), data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["intermediate_size"]))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


class GptOss(Converter):
    """gpt-oss: experts with biases, attention sinks, alternating sliding windows."""

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["intermediate_size"]))
        writer.add_sliding_window(int(config["sliding_window"]))
        kinds = config.get("layer_types") or [
            "sliding_attention" if layer % 2 == 0 else "full_attention" for layer in range(config["num_hidden_layers"])
        ]
        writer.add_array("gpt-oss.attention.sliding_window_pattern", [kind == "sliding_attention" for kind in kinds])


# What llama.cpp's llama4 graph fixes, by the setting mlx_lm reads (with mlx_lm's default where the config has none).
_LLAMA4_FIXED = {"attention_chunk_size": (8192, None), "floor_scale": (8192, 8192), "attn_scale": (0.1, 0.1)}


class Llama4(Converter):
    """Llama 4's language model (mlx_lm's `llama4` wrapper): chunked attention in three layers of four and a global
    layer without rope whose queries are scaled by position, top-1 sigmoid experts weighing the expert's input beside
    a shared expert every `interleave_moe_layer_step`-th layer, dense MLPs of `intermediate_size_mlp` between."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if not config.get("num_local_experts"):
            raise UnsupportedModel("llama4 without experts: llama.cpp's llama4 refuses a model without them")
        for key, (fixed, default) in _LLAMA4_FIXED.items():
            if config.get(key, default) != fixed:
                raise UnsupportedModel(
                    f"llama4 with {key}={config.get(key, default)!r}: llama.cpp's llama4 fixes {fixed}"
                )
        if not config.get("attn_temperature_tuning", 4):
            raise UnsupportedModel(
                "llama4 with attn_temperature_tuning off: llama.cpp's llama4 always scales the global layers' queries"
            )
        if bool(config.get("use_qk_norm")) != (int(config["num_local_experts"]) != 128):
            raise UnsupportedModel(
                f"llama4 with use_qk_norm={config.get('use_qk_norm')!r} and {config['num_local_experts']} experts: "
                "llama.cpp's llama4 norms queries and keys exactly when there are not 128 experts"
            )
        if config.get("attention_bias"):
            raise UnsupportedModel("llama4 with attention_bias=True: llama.cpp's llama4 reads no output bias")

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return head_dim(config)  # llama.cpp's llama4 requires the whole head rotated

    def feed_forward_length(self, config: Dict[str, Any]) -> int:
        return int(config["intermediate_size_mlp"])  # the dense layers'; the experts' is intermediate_size

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["intermediate_size"]))
        writer.add_interleave_moe_layer_step(int(config["interleave_moe_layer_step"]))


# mlx_lm's DBRX keeps each expert apart: (layer, expert, matrix), with llama.cpp's stacked tensor for each matrix.
_DBRX_EXPERT = re.compile(r"^transformer\.blocks\.(\d+)\.ffn\.experts\.(\d+)\.(v1|w1|w2)\.weight$")
_DBRX_STACKED = {"w1": "ffn_gate_exps", "v1": "ffn_up_exps", "w2": "ffn_down_exps"}


class Dbrx(Converter):
    """DBRX: one clipped query/key/value per layer, LayerNorms without biases, softmax top-k experts renormalized,
    under MosaicML's names and keys (`d_model`, `attn_config`, `ffn_config`)."""

    embedding_weight = "transformer.wte.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        if not config["attn_config"].get("clip_qkv"):
            raise UnsupportedModel("dbrx without clip_qkv: mlx_lm's dbrx always clips the query/key/value")

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        attention, ffn = config["attn_config"], config["ffn_config"]
        return {
            **config,
            "hidden_size": int(config["d_model"]),
            "num_hidden_layers": int(config["n_layers"]),
            "num_attention_heads": int(config["n_heads"]),
            "num_key_value_heads": int(attention["kv_n_heads"]),
            "intermediate_size": int(ffn["ffn_hidden_size"]),
            "num_local_experts": int(ffn["moe_num_experts"]),
            "num_experts_per_tok": int(ffn["moe_top_k"]),
            "rope_theta": float(attention["rope_theta"]),
            "max_position_embeddings": int(config.get("max_seq_len") or 2048),
            "layer_norm_eps": 1e-5,  # mlx_lm's LayerNorm default
        }

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        prepared: Dict[str, np.ndarray] = {}
        experts: Dict[Tuple[int, str], Dict[int, np.ndarray]] = {}
        for name, value in weights.items():
            match = _DBRX_EXPERT.match(name)
            if match is None:
                prepared[name] = value
            else:
                layer, expert, matrix = match.groups()
                experts.setdefault((int(layer), matrix), {})[int(expert)] = value
        for (layer, matrix), by_expert in sorted(experts.items()):
            prepared[f"blk.{layer}.{_DBRX_STACKED[matrix]}.weight"] = np.stack(
                [by_expert[e] for e in sorted(by_expert)]
            )
        return prepared

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return [(name, data, name.startswith("blk."))]

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_clamp_kqv(float(config["attn_config"]["clip_qkv"]))


class ExaoneMoe(Converter):
    """K-EXAONE (exaone_moe): sigmoid-scored experts picked with a selection bias, weighed by the unbiased scores
    (normalized, scaled) beside a shared expert, after dense leading layers; rotary embeddings only in the sliding
    layers, per-head query/key norms."""

    def refuse(self, config: Dict[str, Any]) -> None:
        kinds = list(config["layer_types"])
        if "sliding_attention" not in kinds:
            raise UnsupportedModel(
                "exaone_moe without sliding layers: mlx_lm then rotates every layer, llama.cpp's exaone-moe none"
            )
        moe = [bool(flag) for flag in config["is_moe_layer"]]
        if True not in moe:
            raise UnsupportedModel("exaone_moe without expert layers: llama.cpp's exaone-moe requires them")
        dense = moe.index(True)
        if moe != [False] * dense + [True] * (len(moe) - dense):
            raise UnsupportedModel(
                "exaone_moe with dense layers after an expert layer: llama.cpp reads only leading ones"
            )
        if not config.get("num_shared_experts"):
            raise UnsupportedModel("exaone_moe without a shared expert: llama.cpp's exaone-moe requires one")
        if config.get("scoring_func", "sigmoid") != "sigmoid":
            raise UnsupportedModel("exaone_moe with scoring_func other than sigmoid: mlx_lm's routes by sigmoid")
        groups = int(config.get("n_group") or 1)
        if groups > 1 and int(config.get("topk_group") or 1) < groups:
            raise UnsupportedModel("exaone_moe choosing experts within groups: llama.cpp's exaone-moe reads none")

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return float(super().rope_base({"rope_theta": 1000000.0, **config}, local))  # mlx_lm's default

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        experts, shared = int(config["moe_intermediate_size"]), int(config["num_shared_experts"])
        used = int(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(experts)
        writer.add_expert_shared_count(shared)
        writer.add_expert_shared_feed_forward_length(experts * shared)
        writer.add_expert_weights_scale(float(config.get("routed_scaling_factor", 2.5)))
        writer.add_expert_weights_norm(bool(config.get("norm_topk_prob", True)) and used > 1)
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_leading_dense_block_count([bool(flag) for flag in config["is_moe_layer"]].index(True))
        writer.add_sliding_window(int(config["sliding_window"]))
        writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config["layer_types"]])


class Afmoe(Converter):
    """AFMoE (Arcee Trinity): sigmoid-scored experts with a selection bias beside shared ones after dense leading
    layers, norms before and after attention and MLP, a sigmoid gate on the attention output, rotary embeddings only
    in the sliding layers, embeddings scaled by sqrt(hidden_size)."""

    def refuse(self, config: Dict[str, Any]) -> None:
        kinds = list(config["layer_types"])
        llama_cpp = ["full_attention" if (layer + 1) % 4 == 0 else "sliding_attention" for layer in range(len(kinds))]
        if kinds != llama_cpp:
            raise UnsupportedModel(
                "afmoe with sliding layers other than three of every four: llama.cpp's afmoe rotates exactly those"
            )
        if not config.get("mup_enabled", True):
            raise UnsupportedModel("afmoe with mup_enabled=False: llama.cpp's afmoe always scales the embeddings")
        if config.get("score_func", "sigmoid") != "sigmoid":
            raise UnsupportedModel("afmoe with score_func other than sigmoid: not checked against llama.cpp here")
        groups = int(config.get("n_group") or 1)
        if groups > 1 and int(config.get("topk_group") or 1) < groups:
            raise UnsupportedModel("afmoe choosing experts within groups: llama.cpp's afmoe reads none")

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".mlp.expert_bias"):
            return [(blk(name, "exp_probs_b.bias"), data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        used = int(config.get("num_experts_per_tok") or 8)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_count(int(config.get("num_shared_experts", 1)))
        writer.add_leading_dense_block_count(int(config.get("num_dense_layers", 2)))
        writer.add_expert_weights_norm(bool(config.get("route_norm", True)) and used > 1)
        writer.add_expert_weights_scale(float(config.get("route_scale", 2.826)))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_sliding_window(int(config.get("sliding_window") or 2048))
        writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config["layer_types"]])


# Settings of MiMo-V2-Flash's sliding layers that llama.cpp's mimo2 reads once for every layer.
_MIMO2_SHARED = (
    ("swa_head_dim", "head_dim"),
    ("swa_v_head_dim", "v_head_dim"),
    ("swa_num_attention_heads", "num_attention_heads"),
)


class MimoV2(Converter):
    """MiMo-V2-Flash: sliding and global layers with their own key/value head counts and rope bases, attention sinks,
    values wider or narrower than keys and scaled, sigmoid top-k experts (selection bias, normalized, scaled) in the
    layers `moe_layer_freq` marks, dense MLPs in the others."""

    def refuse(self, config: Dict[str, Any]) -> None:
        for sliding, full in _MIMO2_SHARED:
            if config[sliding] != config[full]:
                raise UnsupportedModel(f"mimo_v2_flash with {sliding} apart from {full}: llama.cpp's mimo2 reads one")
        if config.get("n_shared_experts") is not None:
            raise UnsupportedModel("mimo_v2_flash with shared experts: llama.cpp's mimo2 has none")
        if not config.get("norm_topk_prob") or int(config["num_experts_per_tok"]) == 1:
            raise UnsupportedModel(
                "mimo_v2_flash without renormalized top-k weights (norm_topk_prob off or one expert per token): "
                "llama.cpp's mimo2 always renormalizes"
            )
        if config.get("routed_scaling_factor") not in (None, 1.0):
            raise UnsupportedModel(
                "mimo_v2_flash with routed_scaling_factor: llama.cpp's mimo2 never scales the experts' weights"
            )
        groups = int(config.get("n_group") or 1)
        if groups > 1 and int(config.get("topk_group") or 1) < groups:
            raise UnsupportedModel("mimo_v2_flash choosing experts within groups: llama.cpp's mimo2 reads none")

    def kv_head_counts(self, config: Dict[str, Any]) -> List[int]:
        full, sliding = int(config["num_key_value_heads"]), int(config["swa_num_key_value_heads"])
        return [sliding if kind == 1 else full for kind in config["hybrid_layer_pattern"]]

    def value_dims(self, config: Dict[str, Any]) -> int:
        return int(config["v_head_dim"])

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return int(float(config["partial_rotary_factor"]) * int(config["head_dim"]))

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return float(config["swa_rope_theta"] if local else config["rope_theta"])

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # mlx_lm's mimo_v2_flash reads none

    def rms_norm_eps(self, config: Dict[str, Any]) -> float:
        return float(config["layernorm_epsilon"])

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.endswith(".self_attn.attention_sink_bias"):
            return [(blk(name, "attn_sinks.weight"), data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_count(int(config["n_routed_experts"]))
        writer.add_expert_used_count(int(config["num_experts_per_tok"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_sliding_window(int(config["sliding_window_size"]))
        writer.add_sliding_window_pattern([kind == 1 for kind in config["hybrid_layer_pattern"]])
        writer.add_rope_freq_base_swa(self.rope_base(config, local=True))
        if config.get("attention_value_scale") is not None:
            writer.add_float32(f"{family.architecture}.attention.value_scale", float(config["attention_value_scale"]))


# Step 3.5's weights llama.cpp names outside the `gguf` package's map for step35, by their mlx_lm name's ending.
_STEP35_NAMES = {
    ".self_attn.g_proj.weight": "attn_gate.weight",
    ".mlp.gate.gate.weight": "ffn_gate_inp.weight",
    ".mlp.gate.router_bias": "exp_probs_b.bias",
    ".mlp.share_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    ".mlp.share_expert.up_proj.weight": "ffn_up_shexp.weight",
    ".mlp.share_expert.down_proj.weight": "ffn_down_shexp.weight",
}


class Step3p5(Converter):
    """Step 3.5 (step35): sliding and full layers with their own head counts, rope bases and rotated widths, a
    sigmoid gate per head on the attention output, sigmoid-scored experts (selection bias, normalized, scaled) beside
    a shared expert, SwiGLU clamped per layer. llama.cpp halves the rotated width it reads for the full layers."""

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        from .latent_attention import as_mlx_lm_reads

        config = as_mlx_lm_reads(config)
        return {**config, "num_key_value_heads": int(config["num_attention_groups"])}

    def refuse(self, config: Dict[str, Any]) -> None:
        config = self.with_common_keys(config)
        if config.get("rope_scaling"):
            raise UnsupportedModel(
                "step3p5 with rope_scaling: its scaled layers are not checked against llama.cpp here"
            )
        for sliding in (True, False):
            kind = "sliding" if sliding else "full"
            if len({_step35_rope_bases(config)[layer] for layer in _step35_layers(config, sliding)}) > 1:
                raise UnsupportedModel(f"step3p5 with rope_theta varying across {kind} layers: llama.cpp reads one")
            if len({_step35_rotated(config)[layer] for layer in _step35_layers(config, sliding)}) > 1:
                raise UnsupportedModel(
                    f"step3p5 with partial_rotary_factors varying across {kind} layers: llama.cpp reads one"
                )

    def head_counts(self, config: Dict[str, Any]) -> List[int]:
        return [_step35_heads(config, sliding)[0] for sliding in _step35_sliding(config)]

    def kv_head_counts(self, config: Dict[str, Any]) -> List[int]:
        return [_step35_heads(config, sliding)[1] for sliding in _step35_sliding(config)]

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return 2 * _step35_kind_value(config, _step35_rotated(config), sliding=False)  # llama.cpp halves it

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return float(_step35_kind_value(config, _step35_rope_bases(config), sliding=local))

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        for ending, tensor in _STEP35_NAMES.items():
            if name.endswith(ending):
                return [(blk(name, tensor), data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        layers = int(config["num_hidden_layers"])
        moe = _step35_moe_layers(config)
        writer.add_rope_dimension_count_swa(_step35_kind_value(config, _step35_rotated(config), sliding=True))
        writer.add_rope_freq_base_swa(self.rope_base(config, local=True))
        writer.add_sliding_window(int(config["sliding_window"]))
        writer.add_sliding_window_pattern(_step35_sliding(config))
        writer.add_expert_count(int(config["moe_num_experts"]))
        writer.add_expert_used_count(int(config["moe_top_k"]))
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
        writer.add_expert_shared_feed_forward_length(int(config["share_expert_dim"]))
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_expert_weights_scale(float(config["moe_router_scaling_factor"]))
        writer.add_expert_weights_norm(bool(config["norm_expert_weight"]))
        writer.add_leading_dense_block_count(min(moe, default=layers))
        # mlx_lm clamps the routed experts by swiglu_limits, the shared expert and dense MLPs by swiglu_limits_shared.
        writer.add_swiglu_clamp_exp(_step35_limits(config, "swiglu_limits"))
        writer.add_swiglu_clamp_shexp(_step35_limits(config, "swiglu_limits_shared"))


def _step35_sliding(config: Dict[str, Any]) -> List[bool]:
    """Which layers slide, as mlx_lm reads them: `layer_types`, else every even layer."""
    kinds = config.get("layer_types")
    layers = range(int(config["num_hidden_layers"]))
    return [kinds[layer] == "sliding_attention" if kinds else layer % 2 == 0 for layer in layers]


def _step35_layers(config: Dict[str, Any], sliding: bool) -> List[int]:
    return [layer for layer, slides in enumerate(_step35_sliding(config)) if slides == sliding]


def _step35_heads(config: Dict[str, Any], sliding: bool) -> Tuple[int, int]:
    """(query heads, key/value heads) of a sliding or full layer."""
    other = config.get("attention_other_setting") or {}
    if sliding and other:
        return int(other["num_attention_heads"]), int(other["num_attention_groups"])
    return int(config["num_attention_heads"]), int(config["num_attention_groups"])


def _step35_rope_bases(config: Dict[str, Any]) -> List[float]:
    theta = config["rope_theta"]
    return [float(theta[layer] if isinstance(theta, list) else theta) for layer in range(len(_step35_sliding(config)))]


def _step35_rotated(config: Dict[str, Any]) -> List[int]:
    factors = config.get("partial_rotary_factors") or []
    width = int(config["head_dim"])
    layers = range(int(config["num_hidden_layers"]))
    return [int(width * (factors[layer] if layer < len(factors) else 1.0)) for layer in layers]


def _step35_kind_value(config: Dict[str, Any], values: List[Any], sliding: bool) -> Any:
    """The value of the first sliding (or full) layer; `refuse` has checked the others agree; the other kind's
    where the model has none."""
    layers = _step35_layers(config, sliding) or _step35_layers(config, not sliding)
    return values[layers[0]]


def _step35_moe_layers(config: Dict[str, Any]) -> List[int]:
    listed = config.get("moe_layers_enum")
    if listed:
        return sorted(int(layer) for layer in listed.strip().split(","))
    return list(range(1, int(config["num_hidden_layers"])))


def _step35_limits(config: Dict[str, Any], key: str) -> List[float]:
    limits = list(config.get(key) or [])
    return [
        float(limits[layer] or 0.0) if layer < len(limits) else 0.0 for layer in range(len(_step35_sliding(config)))
    ]


CONVERTERS = {
    "qwen3_moe": Qwen3Moe(Family("qwen3moe")),
    "qwen2_moe": Qwen2Moe(Family("qwen2moe")),
    "olmoe": Olmoe(Family("olmoe", output_required=True)),
    "deepseek": DeepSeek(Family("deepseek", permute_rotary=True)),
    "ernie4_5": Ernie45(Family("ernie4_5")),
    "ernie4_5_moe": Ernie45Moe(Family("ernie4_5-moe", key="ERNIE4_5_MOE")),
    "bailing_moe": BailingMoe(Family("bailingmoe", output_required=True)),
    "dots1": Dots1(Family("dots1")),
    "glm4_moe": Glm4Moe(Family("glm4moe", key="GLM4_MOE")),
    "solar_open": Glm4Moe(Family("glm4moe", key="GLM4_MOE")),  # Solar Open: GLM-4.5's model in mlx_lm and llama.cpp
    "minimax_m2": MiniMaxM2(Family("minimax-m2", key="MINIMAXM2")),
    "gpt_oss": GptOss(Family("gpt-oss", key="GPT_OSS", yarn=True)),
    # The language model of mlx_lm's llama4 wrapper, told apart from mlx_lm's dense llama4_text (see families.py).
    "llama4_wrapped_text": Llama4(Family("llama4")),
    "dbrx": Dbrx(Family("dbrx")),
    "afmoe": Afmoe(Family("afmoe")),
    "mimo_v2_flash": MimoV2(Family("mimo2")),
    "exaone_moe": ExaoneMoe(Family("exaone-moe", key="EXAONE_MOE", output_required=True)),
    "step3p5": Step3p5(Family("step35")),
}
