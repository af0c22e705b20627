"""Tiny Falcon-H1 and Nemotron-H models (Mamba 2 hybrids), 256 wide so K-quant blocks fit their rows.

Falcon-H1's folder is written as the Hub ships it (the convolution as (channels, 1, kernel), its multipliers
unfolded), so mlx_lm folds every multiplier into the weights when it loads it, as it does a real checkpoint; each
multiplier is away from 1, the tied head's logit scale included, so a multiplier lost or applied twice on the way
to GGUF changes the tokens. Nemotron-H comes dense (Mamba 2, attention and relu² MLP blocks, two SSM groups) and with
sigmoid-routed experts beside a shared one.
"""

from __future__ import annotations

from pathlib import Path

from tools.kits.tiny_gguf_families import WIDTH, bias_expert_selection
from tools.kits.tiny_hybrid_model import VOCAB_SIZE, build_tiny_hybrid_model

_COMMON = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": WIDTH,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 256,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "bos_token_id": None,
    "torch_dtype": "float32",
}

# Falcon-H1's multipliers, each away from 1 but near enough that 60 LoRA steps still teach the tiny model.
FALCON_H1_MULTIPLIERS = {
    "embedding_multiplier": 2.0,
    "lm_head_multiplier": 1.5,
    "attention_in_multiplier": 1.25,
    "attention_out_multiplier": 0.8,
    "key_multiplier": 0.5,
    "ssm_in_multiplier": 1.1,
    "ssm_out_multiplier": 0.9,
    "ssm_multipliers": [0.9, 1.1, 0.8, 1.2, 0.7],
    "mlp_multipliers": [1.2, 0.8],
}


def falcon_h1_config() -> dict:
    """Two blocks, each a Mamba 2 mixer (8 heads of 64, its gated RMS norm) beside attention, then a gated MLP."""
    return {
        **_COMMON,
        "model_type": "falcon_h1",
        "architectures": ["FalconH1ForCausalLM"],
        "num_hidden_layers": 2,
        "intermediate_size": 2 * WIDTH,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "mamba_d_ssm": 2 * WIDTH,
        "mamba_n_heads": 8,
        "mamba_d_head": 64,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "mamba_chunk_size": 32,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "mamba_rms_norm": True,
        "mamba_norm_before_gate": False,
        "projectors_bias": False,
        "attention_bias": False,
        "mlp_bias": False,
        **FALCON_H1_MULTIPLIERS,
        "tie_word_embeddings": True,
    }


def nemotron_h_config() -> dict:
    """Mamba 2 (8 heads of 64 in two groups), relu² MLP, attention (no rotary embeddings), relu² MLP."""
    return {
        **_COMMON,
        "model_type": "nemotron_h",
        "architectures": ["NemotronHForCausalLM"],
        "num_hidden_layers": 4,
        "hybrid_override_pattern": ["M", "-", "*", "-"],
        "intermediate_size": 2 * WIDTH,
        "attention_bias": False,
        "mamba_num_heads": 8,
        "mamba_head_dim": 64,
        "mamba_proj_bias": False,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "n_groups": 2,
        "chunk_size": 32,
        "mlp_bias": False,
        "layer_norm_epsilon": 1e-5,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": False,
    }


def nemotron_h_moe_config() -> dict:
    """Nemotron 3 Nano's layout: Mamba 2, experts, attention, experts; four sigmoid-routed experts (two per token,
    renormalised, scaled) with a selection bias, beside a shared expert."""
    return {
        **nemotron_h_config(),
        "hybrid_override_pattern": ["M", "E", "*", "E"],
        "moe_intermediate_size": WIDTH,
        "moe_shared_expert_intermediate_size": WIDTH,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "n_group": 1,
        "topk_group": 1,
    }


_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj")
# name: (config builder, mlx_lm module names LoRA may target in it).
MAMBA_FAMILIES = {
    "falcon_h1": (falcon_h1_config, (*_ATTENTION, "gate_proj", "up_proj", "down_proj")),
    "nemotron_h": (nemotron_h_config, (*_ATTENTION, "up_proj", "down_proj")),
    "nemotron_h_moe": (nemotron_h_moe_config, (*_ATTENTION, "up_proj", "down_proj")),
}


def build_mamba_family_model(folder: str | Path, name: str, *, seed: int = 0) -> Path:
    """Write the tiny `name` model (a key of MAMBA_FAMILIES) into `folder` and return its path."""
    config = MAMBA_FAMILIES[name][0]()
    folder = build_tiny_hybrid_model(folder, config["model_type"], seed=seed, config=config)
    if config["model_type"] == "falcon_h1":
        store_as_the_hub_does(folder)
    bias_expert_selection(folder, seed)
    return folder


def store_as_the_hub_does(folder: Path) -> None:
    """Turn the convolutions back to the Hub's (channels, 1, kernel), the layout on which mlx_lm's Falcon-H1 folds
    the config's multipliers into the weights as it loads them."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    for name in [name for name in weights if name.endswith("conv1d.weight")]:
        weights[name] = weights[name].transpose(0, 2, 1)
    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})
