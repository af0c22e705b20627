"""Tiny Qwen 3.5 models (dense and with experts) for GGUF export, 256 wide so K-quant blocks fit their rows.

Each is written as published: the vision-language wrapper with the language model's config under `text_config`,
which mlx_lm loads alone. A linear-attention (gated delta-net) block, then a full-attention block;
twice as many value heads as key heads, so the value heads' order in the exported file matters.
"""

from __future__ import annotations

from pathlib import Path

from tools.kits.tiny_gguf_families import WIDTH
from tools.kits.tiny_hybrid_model import VOCAB_SIZE, build_tiny_hybrid_model


def qwen3_5_text_config() -> dict:
    """Qwen 3.5's language model: a quarter of each 64-wide head rotated, with mrope sections covering it."""
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
        "eos_token_id": 1,
    }


def qwen3_5_moe_text_config() -> dict:
    """Qwen 3.5 MoE's language model: four experts (two per token, renormalised) and a gated shared expert."""
    text = {key: value for key, value in qwen3_5_text_config().items() if key != "intermediate_size"}
    return {
        **text,
        "model_type": "qwen3_5_moe_text",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": WIDTH,
        "shared_expert_intermediate_size": WIDTH,
        "norm_topk_prob": True,
    }


def _wrapped(model_type: str, architecture: str, text: dict) -> dict:
    return {
        "model_type": model_type,
        "architectures": [architecture],
        "text_config": text,
        "tie_word_embeddings": False,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }


def qwen3_5_config() -> dict:
    return _wrapped("qwen3_5", "Qwen3_5ForConditionalGeneration", qwen3_5_text_config())


def qwen3_5_moe_config() -> dict:
    return _wrapped("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", qwen3_5_moe_text_config())


_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj")
# name: (config builder, mlx_lm module names LoRA may target in it).
QWEN35_FAMILIES = {
    "qwen3_5": (qwen3_5_config, (*_TARGETS, "gate_proj", "up_proj", "down_proj")),
    "qwen3_5_moe": (qwen3_5_moe_config, _TARGETS),
}


def build_qwen35_model(folder: str | Path, name: str, *, seed: int = 0, config: dict | None = None) -> Path:
    """Write the tiny `name` model (a key of QWEN35_FAMILIES, or `config`) into `folder` and return its path."""
    config = QWEN35_FAMILIES[name][0]() if config is None else config
    return build_tiny_hybrid_model(folder, config["model_type"], seed=seed, config=config)
