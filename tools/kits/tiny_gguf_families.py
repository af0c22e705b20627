"""Tiny models of the families GGUF export added beyond the first seven, 256 wide so K-quant blocks fit their rows.

The hybrid and gpt-oss configs are `tiny_hybrid_model`'s, widened; Granite 3 (dense attention with Granite's four
multipliers), Qwen 3 MoE (experts in every layer, top-k renormalized) and OLMo 2 are new here. Each folder is written by
`tiny_hybrid_model.build_tiny_hybrid_model`, so `mlx_lm` loads it with its own class and a byte-level BPE tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.kits.tiny_hybrid_model import (
    VOCAB_SIZE,
    build_tiny_hybrid_model,
    gpt_oss_config,
    granitemoehybrid_config,
    lfm2_config,
)

WIDTH = 256
_WIDE = {"hidden_size": WIDTH, "num_attention_heads": 4, "num_key_value_heads": 2}
_COMMON_DENSE = {
    "vocab_size": VOCAB_SIZE,
    **_WIDE,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "bos_token_id": None,
    "torch_dtype": "float32",
}


# Granite's four multipliers, each away from 1 but with a small embedding term, so that LoRA's updates are not
# drowned by the token embedding in the residual stream (at Granite's own 12x, 60 steps teach a tiny model nothing).
LEARNABLE_MULTIPLIERS = {
    "embedding_multiplier": 0.5,
    "attention_multiplier": 0.1,
    "residual_multiplier": 0.8,
    "logits_scaling": 0.5,
}


def wide_lfm2() -> dict:
    return {**lfm2_config(), **_WIDE, "block_dim": WIDTH, "block_ff_dim": 2 * WIDTH}


def lfm2_moe_config() -> dict:
    """LFM2 MoE: the first block dense, then four sigmoid-routed experts (two per token) with a selection bias."""
    config = {key: value for key, value in wide_lfm2().items() if not key.startswith("block_")}
    return {
        **config,
        "model_type": "lfm2_moe",
        "architectures": ["Lfm2MoeForCausalLM"],
        "intermediate_size": 2 * WIDTH,
        "moe_intermediate_size": WIDTH,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "use_expert_bias": True,
        "num_dense_layers": 1,
        "routed_scaling_factor": 1.0,
        "tie_word_embeddings": True,
    }


def wide_granitemoehybrid(moe: bool) -> dict:
    """Mamba's inner size is twice the width, the one expansion llama.cpp's Granite hybrid accepts."""
    config = {**granitemoehybrid_config(moe=moe), **_WIDE, "intermediate_size": WIDTH, "mamba_d_head": 64}
    config.update(LEARNABLE_MULTIPLIERS)
    if moe:
        config["shared_intermediate_size"] = WIDTH
    return config


def wide_gpt_oss() -> dict:
    return {**gpt_oss_config(), **_WIDE, "head_dim": 64, "intermediate_size": WIDTH}


def granite_config() -> dict:
    """Granite 3's dense decoder: llama's layout with embedding, attention, residual and logit multipliers."""
    return {
        **_COMMON_DENSE,
        "model_type": "granite",
        "architectures": ["GraniteForCausalLM"],
        "intermediate_size": 2 * WIDTH,
        **LEARNABLE_MULTIPLIERS,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
    }


def qwen3_moe_config() -> dict:
    """Four experts, two per token, in both layers; Qwen 3's per-head query and key norms."""
    return {
        **_COMMON_DENSE,
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "head_dim": 64,
        "intermediate_size": 2 * WIDTH,
        "moe_intermediate_size": WIDTH,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
    }


def qwen3_config() -> dict:
    """Qwen 3 dense: per-head query and key norms, a head wider than hidden / heads."""
    return {
        **_COMMON_DENSE,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": 64,
        "intermediate_size": 2 * WIDTH,
        "tie_word_embeddings": False,
    }


# YaRN with an original context short enough that the test prompt's positions pass it.
YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}


def olmo2_config() -> dict:
    """OLMo 2: norms after attention and MLP rather than before, query and key normed over all heads at once."""
    return {
        **_COMMON_DENSE,
        "model_type": "olmo2",
        "architectures": ["Olmo2ForCausalLM"],
        "intermediate_size": 2 * WIDTH,
        "attention_bias": False,
        "tie_word_embeddings": False,
    }


def ernie4_5_config() -> dict:
    """ERNIE 4.5 dense: llama's layout with interleaved rotary pairs (mlx_lm's traditional RoPE), tied embeddings."""
    return {
        **_COMMON_DENSE,
        "model_type": "ernie4_5",
        "architectures": ["Ernie4_5_ForCausalLM"],
        "head_dim": 64,
        "intermediate_size": 2 * WIDTH,
        "use_bias": False,
        "tie_word_embeddings": True,
    }


def ernie4_5_moe_config() -> dict:
    """ERNIE 4.5 MoE: a dense first layer, then four experts (two per token) beside one shared expert."""
    return {
        **ernie4_5_config(),
        "model_type": "ernie4_5_moe",
        "architectures": ["Ernie4_5_MoeForCausalLM"],
        "num_hidden_layers": 3,
        "moe_intermediate_size": WIDTH,
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_layer_start_index": 1,
        "moe_layer_interval": 1,
        "moe_num_shared_experts": 1,
        "tie_word_embeddings": False,
    }


def _generic(model_type: str, architecture: str, **extra) -> dict:
    return {
        **_COMMON_DENSE,
        "model_type": model_type,
        "architectures": [architecture],
        "intermediate_size": WIDTH,
        **extra,
    }


def gemma4_text_config() -> dict:
    """Gemma 4's text model (as E2B): sliding layers with 64-wide heads and a short window, full layers with 128-wide
    heads rotating a quarter of each, the last two layers reusing earlier keys and values with double-wide MLPs,
    per-layer token embeddings and final logit softcapping."""
    return {
        **_COMMON_DENSE,
        "model_type": "gemma4_text",
        "architectures": ["Gemma4ForCausalLM"],
        "num_hidden_layers": 4,
        "head_dim": 64,
        "global_head_dim": 128,
        "intermediate_size": WIDTH,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "sliding_window": 8,
        "num_kv_shared_layers": 2,
        "use_double_wide_mlp": True,
        "hidden_size_per_layer_input": 64,
        "vocab_size_per_layer_input": VOCAB_SIZE,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
    }


_EXPERTS = {"num_experts": 4, "num_experts_per_tok": 2}
# Families the name map and the common keys reach with no code of their own: checked untrained, f16 only.
GENERIC_FAMILIES = {
    "gemma": lambda: _generic("gemma", "GemmaForCausalLM", head_dim=64),
    "ernie4_5": ernie4_5_config,
    "mixtral": lambda: _generic("mixtral", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2),
    "seed_oss": lambda: _generic("seed_oss", "SeedOssForCausalLM", head_dim=64, attention_bias=True),
    "olmoe": lambda: _generic("olmoe", "OlmoeForCausalLM", **_EXPERTS, norm_topk_prob=False, num_key_value_heads=4),
    "internlm3": lambda: _generic("internlm3", "InternLM3ForCausalLM", qkv_bias=True, bias=True),
    "hunyuan_v1_dense": lambda: _generic(
        "hunyuan_v1_dense",
        "HunYuanDenseV1ForCausalLM",
        head_dim=64,
        rope_scaling={"type": "dynamic", "alpha": 1000.0, "factor": 1.0},
    ),
    # Four layers, so that the fourth runs without rotary embeddings.
    "smollm3": lambda: _generic("smollm3", "SmolLM3ForCausalLM", head_dim=64, num_hidden_layers=4),
    # LayerNorm families (biases, their own epsilon key); Phi-2 rotates half of each head.
    "starcoder2": lambda: _generic("starcoder2", "Starcoder2ForCausalLM", norm_epsilon=1e-5),
    "phi": lambda: _generic("phi", "PhiForCausalLM", partial_rotary_factor=0.5, layer_norm_eps=1e-5),
    "cohere": lambda: _generic("cohere", "CohereForCausalLM", layer_norm_eps=1e-5, logit_scale=0.25),
    "glm4": lambda: _generic("glm4", "Glm4ForCausalLM", head_dim=64, partial_rotary_factor=0.5, attention_bias=False),
    "stablelm": lambda: _generic(
        "stablelm", "StableLmForCausalLM", partial_rotary_factor=0.5, layer_norm_eps=1e-5, use_qkv_bias=False
    ),
    "qwen2_moe": lambda: _generic(
        "qwen2_moe",
        "Qwen2MoeForCausalLM",
        **_EXPERTS,
        moe_intermediate_size=WIDTH,
        shared_expert_intermediate_size=WIDTH,
    ),
    # GLM-4.5 (Air): a dense first layer, then sigmoid-routed experts (scaled, normalised) beside a shared one.
    "glm4_moe": lambda: _generic(
        "glm4_moe",
        "Glm4MoeForCausalLM",
        head_dim=64,
        partial_rotary_factor=0.5,
        attention_bias=True,
        use_qk_norm=True,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=WIDTH,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        rope_scaling=None,
        tie_word_embeddings=False,
    ),
    # Granite 3 MoE: softmax top-k experts in every layer, under Granite's four multipliers.
    "granitemoe": lambda: _generic(
        "granitemoe",
        "GraniteMoeForCausalLM",
        **LEARNABLE_MULTIPLIERS,
        num_local_experts=4,
        num_experts_per_tok=2,
        attention_bias=False,
    ),
    # EXAONE 4.0 as the 1.2B: every layer global, query/key norms, norms after attention and MLP.
    "exaone4": lambda: _generic(
        "exaone4",
        "Exaone4ForCausalLM",
        head_dim=64,
        tie_word_embeddings=True,
        rope_scaling=None,
        sliding_window=None,
        sliding_window_pattern=None,
        layer_types=["full_attention", "full_attention"],
    ),
    # MiniMax-M2: sigmoid-routed experts with a selection bias, full-width query/key norms, half of each head rotated.
    "minimax_m2": lambda: _generic(
        "minimax_m2",
        "MiniMaxM2ForCausalLM",
        head_dim=64,
        rotary_dim=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=0,
        use_qk_norm=True,
        scoring_func="sigmoid",
    ),
    # OLMo 3 and Command R7B: sliding windows shorter than the prompt, the 4th layer global.
    "olmo3": lambda: _generic("olmo3", "Olmo3ForCausalLM", head_dim=64, num_hidden_layers=4, sliding_window=8),
    "cohere2": lambda: _generic(
        "cohere2",
        "Cohere2ForCausalLM",
        head_dim=64,
        num_hidden_layers=4,
        sliding_window=8,
        sliding_window_pattern=4,
        layer_norm_eps=1e-5,
        logit_scale=0.25,
    ),
}


def llama4_config() -> dict:
    """Llama 4 as published (the wrapper whose language model mlx_lm loads alone): four layers, the 4th global
    without rope, experts in every 2nd (top-1 of four beside a shared one), Scout's llama3 rope scaling."""
    text = {
        **{key: value for key, value in _COMMON_DENSE.items() if key not in ("bos_token_id", "torch_dtype")},
        "model_type": "llama4_text",
        "num_hidden_layers": 4,
        "head_dim": 64,
        "intermediate_size": WIDTH,
        "intermediate_size_mlp": 2 * WIDTH,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
        "attention_chunk_size": 8192,
        "attention_bias": False,
        "use_qk_norm": True,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    }
    shared = {key: _COMMON_DENSE[key] for key in ("vocab_size", "eos_token_id", "pad_token_id", "torch_dtype")}
    return {
        **shared,
        "model_type": "llama4",
        "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": text,
        "tie_word_embeddings": False,
    }


# Families checked untrained in f32 against llama.cpp (tests/mlx_api/with_llama_cpp/test_gguf_untrained_families_...).
UNTRAINED_FAMILIES = {
    # GLM-4 (glm-4-9b-chat-hf): fused gate and up rows, query/key/value biases, whole heads rotated in adjacent pairs.
    "glm": lambda: _generic("glm", "GlmForCausalLM", head_dim=64, attention_bias=True, tie_word_embeddings=False),
    # Qwen3-Next: a gated delta-net block with two value heads per key head, then a gated attention block rotating a
    # quarter of each head; four experts (two per token, renormalized) beside a gated shared expert in each.
    "qwen3_next": lambda: _generic(
        "qwen3_next",
        "Qwen3NextForCausalLM",
        head_dim=64,
        partial_rotary_factor=0.25,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
        full_attention_interval=2,
        **_EXPERTS,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        moe_intermediate_size=WIDTH,
        shared_expert_intermediate_size=WIDTH,
        tie_word_embeddings=False,
    ),
    "llama4": llama4_config,
    # MiniCPM: the embedding, each residual branch and the logits scaled away from 1 and from llama.cpp's defaults.
    "minicpm": lambda: _generic(
        "minicpm", "MiniCPMForCausalLM", scale_emb=2.0, scale_depth=2.5, dim_model_base=64, tie_word_embeddings=False
    ),
    # InternLM2: a fused wqkv grouping two query heads with each key/value head.
    "internlm2": lambda: _generic("internlm2", "InternLM2ForCausalLM", bias=False, tie_word_embeddings=False),
    # GPT-NeoX (Pythia): head-by-head fused query/key/value with biases, a quarter of each head rotated, parallel
    # residuals.
    "gpt_neox": lambda: _generic(
        "gpt_neox",
        "GPTNeoXForCausalLM",
        num_key_value_heads=4,
        intermediate_size=4 * WIDTH,
        rotary_pct=0.25,
        rotary_emb_base=10000,
        layer_norm_eps=1e-5,
        use_parallel_residual=True,
    ),
    # IQuest-Coder and XVERSE, which mlx_lm runs as llama: grouped heads, a separate head, llama's rotary row order.
    "iquestcoder": lambda: _generic("iquestcoder", "IQuestCoderForCausalLM", tie_word_embeddings=False),
    "xverse": lambda: _generic("xverse", "XverseForCausalLM", tie_word_embeddings=False),
    # Nemotron: LayerNorm of 1 + weight with biases, a squared-ReLU MLP with biases, a quarter of each head rotated.
    "nemotron": lambda: _generic(
        "nemotron",
        "NemotronForCausalLM",
        hidden_act="relu2",
        norm_eps=1e-5,
        partial_rotary_factor=0.25,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
    ),
    # EXAONE 3.5: GPT-2's names and layer count key, RMS norms, a separate head.
    "exaone": lambda: {
        **{key: value for key, value in _generic("exaone", "ExaoneForCausalLM").items() if key != "num_hidden_layers"},
        "num_layers": 2,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "silu",
        "tie_word_embeddings": False,
    },
    # Solar Open: GLM-4.5's layout (mlx_lm's glm4_moe model, llama.cpp's glm4moe) under its own model_type.
    "solar_open": lambda: {
        **{key: value for key, value in GENERIC_FAMILIES["glm4_moe"]().items() if key != "rope_scaling"},
        "model_type": "solar_open",
        "architectures": ["SolarOpenForCausalLM"],
    },
    # dots.llm1: a dense first layer, then sigmoid top-2 of four experts (biased selection, normalized and scaled
    # weights) beside a shared one; per-head query/key norms, no grouped heads (as llama.cpp's dots1 sizes them).
    "dots1": lambda: _generic(
        "dots1",
        "Dots1ForCausalLM",
        head_dim=64,
        num_key_value_heads=4,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=WIDTH,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        scoring_func="noaux_tc",
        n_group=1,
        topk_group=1,
        tie_word_embeddings=False,
    ),
    # StarCoder 1 (gpt_bigcode): GPT-2's keys, learned positions, multi-query attention, a GELU MLP, biases.
    "gpt_bigcode": lambda: {
        "model_type": "gpt_bigcode",
        "architectures": ["GPTBigCodeForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "n_embd": WIDTH,
        "n_layer": 2,
        "n_head": 4,
        "n_inner": 4 * WIDTH,
        "n_positions": 256,
        "layer_norm_epsilon": 1e-5,
        "multi_query": True,
        "activation_function": "gelu_pytorch_tanh",
        "tie_word_embeddings": False,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "bos_token_id": None,
        "torch_dtype": "float32",
    },
    # GPT-2: the same keys, every head its own key/value head, a tied head.
    "gpt2": lambda: {
        **{key: value for key, value in UNTRAINED_FAMILIES["gpt_bigcode"]().items() if key != "multi_query"},
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_ctx": 256,
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
    },
    # Ling (bailing_moe): softmax top-2 of four experts (normalized, scaled) beside a shared one in every layer, one
    # fused query_key_value with grouped heads.
    "bailing_moe": lambda: _generic(
        "bailing_moe",
        "BailingMoeForCausalLM",
        num_experts=4,
        num_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=WIDTH,
        first_k_dense_replace=0,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        tie_word_embeddings=False,
    ),
    # Mamba (1): selective-scan blocks only, a tied head.
    "mamba": lambda: {
        "model_type": "mamba",
        "architectures": ["MambaForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "state_size": 16,
        "num_hidden_layers": 2,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_rank": 16,
        "tie_word_embeddings": True,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "bos_token_id": None,
        "torch_dtype": "float32",
    },
    # DeepSeek (v1): a dense first layer, then softmax top-2 of four experts beside a shared one.
    "deepseek": lambda: _generic(
        "deepseek",
        "DeepseekForCausalLM",
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=WIDTH,
        first_k_dense_replace=1,
        moe_layer_freq=1,
        tie_word_embeddings=False,
    ),
}


def ministral3_config() -> dict:
    """Ministral 3's text model: llama's layout, YaRN in `rope_parameters` and Llama 4's attention temperature, with
    an original context short enough that the test prompt passes it."""
    config = {key: value for key, value in _COMMON_DENSE.items() if key != "rope_theta"}
    return {
        **config,
        "model_type": "ministral3",
        "architectures": ["Ministral3ForCausalLM"],
        "head_dim": 64,
        "intermediate_size": 2 * WIDTH,
        "tie_word_embeddings": False,
        "rope_parameters": {
            **YARN,
            "rope_theta": 10000.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1,
        },
    }


def mistral3_config() -> dict:
    """Ministral 3 as published: the vision-language wrapper, whose text model mlx_lm loads alone."""
    text = ministral3_config()
    shared = {key: text[key] for key in ("vocab_size", "eos_token_id", "pad_token_id", "bos_token_id", "torch_dtype")}
    return {
        **shared,
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": text,
    }


def gemma4_config() -> dict:
    """Gemma 4 as published: the multimodal wrapper, whose language model mlx_lm loads alone."""
    text = {key: value for key, value in gemma4_text_config().items() if key != "vocab_size"}
    return {
        "model_type": "gemma4",
        "architectures": ["Gemma4ForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE,
        "text_config": text,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }


# name: (config builder, mlx_lm module names LoRA may target in it).
GGUF_FAMILIES = {
    "lfm2": (wide_lfm2, ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3")),
    "granitemoehybrid": (
        lambda: wide_granitemoehybrid(moe=True),
        ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj", "input_linear", "output_linear"),
    ),
    "granitemoehybrid_dense": (
        lambda: wide_granitemoehybrid(moe=False),
        ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj", "gate_proj", "up_proj", "down_proj"),
    ),
    "gpt_oss": (wide_gpt_oss, ("q_proj", "k_proj", "v_proj", "o_proj")),
    "granite": (granite_config, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    "qwen3_moe": (qwen3_moe_config, ("q_proj", "k_proj", "v_proj", "o_proj")),
    "olmo2": (olmo2_config, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
}
_DENSE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The families of published notebooks, added by issue 39: tested in their own llama.cpp file.
NOTEBOOK_FAMILIES = {
    "ernie4_5_moe": (ernie4_5_moe_config, _DENSE_TARGETS),
    "mistral3": (mistral3_config, _DENSE_TARGETS),
    "lfm2_moe": (lfm2_moe_config, ("q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3")),
    "gemma4_text": (gemma4_text_config, _DENSE_TARGETS),
}


def split_as_o200k(folder: Path) -> None:
    """Make the folder's byte-level BPE split text with o200k's regex first, as gpt-oss's tokenizer does."""
    from unsloth.mlx.gguf.tokenizer import GPT4O_REGEX

    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    split = {"type": "Split", "pattern": {"Regex": GPT4O_REGEX}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")


def build_gguf_family_model(folder: str | Path, name: str, *, seed: int = 0) -> Path:
    """Write the tiny `name` model (a key of GGUF_FAMILIES or NOTEBOOK_FAMILIES) into `folder` and return its path; gpt-oss gets
    o200k's splitting."""
    config = {**GGUF_FAMILIES, **NOTEBOOK_FAMILIES}[name][0]()
    folder = build_tiny_hybrid_model(folder, config["model_type"], seed=seed, config=config)
    if config["model_type"] == "gpt_oss":
        split_as_o200k(folder)
    if config["model_type"] == "lfm2_moe":
        bias_expert_selection(folder, seed)
    return folder


def bias_expert_selection(folder: Path, seed: int) -> None:
    """Give expert selection biases (LFM2 MoE's, GLM-4.5's, Step 3.5's) values, as mlx_lm starts them at zero, so that a lost
    bias changes the experts; a model without them is left as it is."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    rng = np.random.default_rng(seed)
    biases = [name for name in weights if name.endswith((".expert_bias", ".e_score_correction_bias", ".router_bias"))]
    if not biases:
        return
    for name in biases:
        weights[name] = mx.array(rng.normal(0.0, 0.5, weights[name].shape).astype(np.float32))
    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})


def spread_zero_routers(folder: Path, seed: int) -> None:
    """Give the routers mlx_lm starts at zero (DeepSeek's `MoEGate`) random rows, so that which experts a token picks
    depends on the router as exported, not on how two libraries break a tie."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    rng = np.random.default_rng(seed)
    zero = [name for name, value in weights.items() if name.endswith(".mlp.gate.weight") and not mx.any(value).item()]
    for name in zero:
        weights[name] = mx.array(rng.normal(0.0, 0.5, weights[name].shape).astype(np.float32))
    if zero:
        mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})
