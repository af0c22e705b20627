"""Tiny latent-attention models (GLM-4.7-Flash's `glm4_moe_lite`) for GGUF export to llama.cpp's deepseek2.

The hidden size is 256 so K-quant blocks fit the rows that read it; the latent, rotated, unrotated and value widths
are all different, so a transposed or swapped per-head matrix cannot pass. Each folder is written by
`tiny_hybrid_model.build_tiny_hybrid_model` (mlx_lm's own class, a byte-level BPE tokenizer), with the experts'
selection bias given values by `tiny_gguf_families.bias_expert_selection`.
"""

from __future__ import annotations

from pathlib import Path

from tools.kits.tiny_gguf_families import WIDTH, bias_expert_selection
from tools.kits.tiny_hybrid_model import VOCAB_SIZE, build_tiny_hybrid_model


def glm4_moe_lite_config() -> dict:
    """A dense first layer, then four sigmoid-routed experts (two per token, renormalised and scaled) beside a
    shared one; queries through their own low-rank projection, keys and values through a 64-wide latent."""
    return {
        "model_type": "glm4_moe_lite",
        "architectures": ["Glm4MoeLiteForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 2 * WIDTH,
        "moe_intermediate_size": WIDTH,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "routed_scaling_factor": 1.5,
        "norm_topk_prob": True,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": 96,
        "kv_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 40,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "bos_token_id": None,
        "torch_dtype": "float32",
    }


def deepseek_v3_config() -> dict:
    """DeepSeek V3's layout on the same widths, with what GLM-4.7-Flash's row does not reach: a plain query matrix
    (as DeepSeek V2-Lite) and experts chosen within groups (8 experts in 2 groups, the best group kept)."""
    return {
        **glm4_moe_lite_config(),
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "q_lora_rank": None,
        "n_routed_experts": 8,
        "n_group": 2,
        "topk_group": 1,
    }


def deepseek_v2_config() -> dict:
    """DeepSeek V2's layout: the same attention with its key/value expansion unsplit (`kv_b_proj`, a LoRA target
    here), experts routed by softmax and never renormalised, and the rope scaling mlx_lm requires (factor 1: none)."""
    return {
        **glm4_moe_lite_config(),
        "model_type": "deepseek_v2",
        "architectures": ["DeepseekV2ForCausalLM"],
        "topk_method": "greedy",
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "rope_scaling": {"type": "yarn", "factor": 1.0, "original_max_position_embeddings": 256},
    }


def kimi_k2_config() -> dict:
    """Kimi K2: DeepSeek V3's layout under its own model_type, with one expert group as Kimi K2 has (DeepSeek V3's
    groups need a selection bias to stand apart untrained: `test_llama_cpp_chooses_experts_within_groups_...`)."""
    config = {**deepseek_v3_config(), "model_type": "kimi_k2", "n_group": 1, "topk_group": 1}
    config.pop("rope_scaling", None)  # transformers warns on it for a type it reads with its generic config
    return config


def glm_moe_dsa_config() -> dict:
    """GLM-5's layout on GLM-4.7-Flash's widths, with an indexer (four 64-wide heads) keeping each query's 8 best
    keys, fewer than the prompt has, so that the sparse attention decides the logits."""
    config = {key: value for key, value in glm4_moe_lite_config().items() if key not in ("rope_theta", "rope_scaling")}
    return {
        **config,
        "model_type": "glm_moe_dsa",
        "architectures": ["GlmMoeDsaForCausalLM"],
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "index_n_heads": 4,
        "index_head_dim": 64,
        "index_topk": 8,
        "indexer_rope_interleave": True,
    }


# Types mlx_lm runs as DeepSeek V3 (its MODEL_REMAPPING), for the untrained f32 llama.cpp check beside
# `tiny_gguf_families.UNTRAINED_FAMILIES`: latent attention, sigmoid experts beside a shared one.
UNTRAINED_MLA_FAMILIES = {
    "kimi_k2": kimi_k2_config,
    "joyai_llm_flash": lambda: {**kimi_k2_config(), "model_type": "joyai_llm_flash"},
    "glm_moe_dsa": glm_moe_dsa_config,
}


# The projections LoRA may target in mlx_lm's latent attention (the per-head latent matrices are not Linear layers).
_SHARED_TARGETS = ("kv_a_proj_with_mqa", "o_proj", "gate_proj", "up_proj", "down_proj")
MLA_FAMILIES = {
    "glm4_moe_lite": (glm4_moe_lite_config, ("q_a_proj", "q_b_proj", *_SHARED_TARGETS)),
    "deepseek_v3": (deepseek_v3_config, ("q_proj", *_SHARED_TARGETS)),
    "deepseek_v2": (deepseek_v2_config, ("q_a_proj", "q_b_proj", "kv_b_proj", *_SHARED_TARGETS)),
}


def build_mla_model(folder: str | Path, name: str, *, seed: int = 0, **overrides) -> Path:
    """Write the tiny `name` model (a key of MLA_FAMILIES, its config updated by `overrides`) into `folder`."""
    config = {**MLA_FAMILIES[name][0](), **overrides}
    folder = build_tiny_hybrid_model(folder, config["model_type"], seed=seed, config=config)
    bias_expert_selection(folder, seed)
    return folder
