"""Tiny random-weight folders of mlx_lm's hybrid and MoE families (LFM2, Granite 4.0-H, gpt-oss) that `mlx_lm` loads.

Each config keeps its family's traits that decide where LoRA goes: LFM2 and Granite 4.0-H open with a convolution
or Mamba block before any attention block, Granite's MoE variant has a shared MLP beside SwitchGLU experts, and
gpt-oss's MLP is all SwitchGLU experts.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.kits.tiny_mlx_model import write_random_weights, write_tokenizer

VOCAB_SIZE = 512
_COMMON = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "bos_token_id": None,
    "torch_dtype": "float32",
}


def lfm2_config() -> dict:
    """Four blocks, attention only in the second and fourth (LFM2 interleaves short convolutions and attention)."""
    return {
        **_COMMON,
        "model_type": "lfm2",
        "architectures": ["Lfm2ForCausalLM"],
        "num_hidden_layers": 4,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_ff_dim": 128,
        "block_multiple_of": 32,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "layer_types": ["conv", "full_attention", "conv", "full_attention"],
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    }


def granitemoehybrid_config(moe: bool = True) -> dict:
    """Mamba, attention, Mamba; with `moe` each block has a shared MLP beside its experts, else a dense MLP."""
    experts = {"num_local_experts": 4, "num_experts_per_tok": 2, "shared_intermediate_size": 128} if moe else {}
    return {
        **_COMMON,
        "model_type": "granitemoehybrid",
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "num_hidden_layers": 3,
        "intermediate_size": 64,
        "attention_bias": False,
        "embedding_multiplier": 12.0,
        "attention_multiplier": 0.125,
        "logits_scaling": 4.0,
        "residual_multiplier": 0.25,
        "layer_types": ["mamba", "attention", "mamba"],
        "rms_norm_eps": 1e-5,
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_proj_bias": False,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "mamba_conv_bias": True,
        "position_embedding_type": "rope",
        "tie_word_embeddings": True,
        **experts,
    }


def gpt_oss_config() -> dict:
    """Two blocks (one sliding, one full attention), four experts, two per token."""
    return {
        **_COMMON,
        "model_type": "gpt_oss",
        "architectures": ["GptOssForCausalLM"],
        "num_hidden_layers": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 64,
        "head_dim": 16,
        "sliding_window": 32,
        "rope_theta": 150000,
        "rms_norm_eps": 1e-5,
        "layer_types": ["sliding_attention", "full_attention"],
        "tie_word_embeddings": False,
    }


HYBRID_CONFIGS = {"lfm2": lfm2_config, "granitemoehybrid": granitemoehybrid_config, "gpt_oss": gpt_oss_config}


def build_tiny_hybrid_model(
    folder: str | Path, architecture: str, *, seed: int = 0, config: dict | None = None
) -> Path:
    """Write a loadable tiny `architecture` model (or one from `config`) into `folder` and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = HYBRID_CONFIGS[architecture]() if config is None else config
    write_tokenizer(folder, VOCAB_SIZE, None, "gpt2")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    write_random_weights(folder, config, seed)
    return folder
