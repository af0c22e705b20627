"""Tiny models of the text families issue 46 added to GGUF export, for the untrained f32 llama.cpp check beside
`tiny_gguf_families.UNTRAINED_FAMILIES`.

Each keeps what its converter must get right: OpenELM's per-layer head counts and widths, DBRX's clipped fused
query/key/value, MiniCPM 3's scales and long rope factors away from llama.cpp's fixed ones, K-EXAONE's dense leading
layer and sliding layers, Apertus' xIELU settings different in each layer (`vary_activation_settings`), and the
vision-language wrappers whose language model mlx_lm loads alone. Each folder is written by
`tiny_hybrid_model.build_tiny_hybrid_model`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.kits.tiny_gguf_families import UNTRAINED_FAMILIES, WIDTH, _generic
from tools.kits.tiny_gguf_mla import kimi_k2_config
from tools.kits.tiny_hybrid_model import VOCAB_SIZE

_IDS = {"eos_token_id": 1, "pad_token_id": 0, "bos_token_id": None, "torch_dtype": "float32"}


def openelm_config() -> dict:
    """Four query heads over two key/value heads in the first layer, two over one in the second, MLPs of 128 and 256."""
    return {
        "model_type": "openelm",
        "architectures": ["OpenELMForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "model_dim": WIDTH,
        "head_dim": 64,
        "num_transformer_layers": 2,
        "num_query_heads": [4, 2],
        "num_kv_heads": [2, 1],
        "ffn_multipliers": [0.5, 1.0],
        "ffn_dim_divisor": 64,
        "ffn_with_glu": True,
        "normalize_qk_projections": True,
        "share_input_output_layers": True,
        "rms_norm_eps": 1e-6,
        "rope_freq_constant": 10000,
        "max_context_length": 256,
        **_IDS,
    }


def dbrx_config() -> dict:
    """Four experts, two per token; a clip the untrained query/key/value rows pass, so that a lost clip shows."""
    return {
        "model_type": "dbrx",
        "architectures": ["DbrxForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "d_model": WIDTH,
        "n_layers": 2,
        "n_heads": 4,
        "max_seq_len": 256,
        "attn_config": {"kv_n_heads": 2, "clip_qkv": 0.3, "rope_theta": 10000.0},
        "ffn_config": {"ffn_hidden_size": WIDTH, "moe_num_experts": 4, "moe_top_k": 2},
        **_IDS,
    }


def minicpm3_config() -> dict:
    """Latent attention (64-wide query rank, 32-wide latent, 16 rotated of 48), scales away from llama.cpp's fixed
    12 / 1.4 / 256, long rope factors apart from 1 and a context 16 times the original."""
    return {
        **_generic("minicpm3", "MiniCPM3ForCausalLM", num_key_value_heads=4, tie_word_embeddings=False),
        "rms_norm_eps": 1e-5,
        "q_lora_rank": 64,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "scale_emb": 2.0,
        "scale_depth": 2.5,
        "dim_model_base": 64,
        "rope_scaling": {
            "rope_type": "longrope",
            "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0],
            "short_factor": [1.0] * 8,
            "original_max_position_embeddings": 16,
        },
    }


def exaone_moe_config() -> dict:
    """A dense first layer, then sigmoid top-2 of four experts (biased selection, normalized and scaled weights)
    beside a shared one; the first two layers sliding (with rotary embeddings), the third global (without)."""
    return {
        **_generic("exaone_moe", "ExaoneMoEForCausalLM", num_hidden_layers=3, head_dim=64, tie_word_embeddings=False),
        "moe_intermediate_size": WIDTH,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "routed_scaling_factor": 1.5,
        "norm_topk_prob": True,
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "is_moe_layer": [False, True, True],
    }


def step3p5_config() -> dict:
    """A dense full layer (four heads over two, half of each head rotated, base 1e6), then three sliding ones over
    8 positions (eight heads over four, all rotated, base 5e4, away from llama.cpp's default 1e4) with sigmoid top-2 of four experts beside a shared
    one; a gate per head, and SwiGLU limits low enough to clamp in some layers."""
    return {
        **_generic("step3p5", "Step3p5ForCausalLM", num_hidden_layers=4, head_dim=64, tie_word_embeddings=False),
        "num_attention_groups": 2,
        "attention_other_setting": {"num_attention_heads": 8, "num_attention_groups": 4},
        "layer_types": ["full_attention"] + ["sliding_attention"] * 3,
        "partial_rotary_factors": [0.5, 1.0, 1.0, 1.0],
        "rope_theta": [1000000.0, 50000.0, 50000.0, 50000.0],
        "sliding_window": 8,
        "moe_num_experts": 4,
        "moe_top_k": 2,
        "moe_intermediate_size": WIDTH,
        "share_expert_dim": WIDTH,
        "moe_layers_enum": "1,2,3",
        "moe_router_scaling_factor": 1.5,
        "norm_expert_weight": True,
        "swiglu_limits": [0.0, 0.02, 0.0, 0.02],
        "swiglu_limits_shared": [0.02, 0.0, 0.02, 0.0],
    }


def kimi_linear_config() -> dict:
    """Delta-net layers 1, 2 and 4 (four 64-wide heads), latent attention in the 3rd (a 64-wide latent, 32 + 16 key
    and 40 value widths per head), a dense first layer, then sigmoid top-2 of four experts (selection bias,
    renormalized, scaled) beside a shared one."""
    return {
        **_generic("kimi_linear", "KimiLinearForCausalLM", num_hidden_layers=4, head_dim=64, tie_word_embeddings=False),
        "linear_attn_config": {
            "num_heads": 4,
            "head_dim": 64,
            "short_conv_kernel_size": 4,
            "kda_layers": [1, 2, 4],
            "full_attn_layers": [3],
        },
        "model_max_length": 256,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 40,
        "mla_use_nope": True,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": WIDTH,
        "first_k_dense_replace": 1,
        "routed_scaling_factor": 1.5,
        "moe_router_activation_func": "sigmoid",
    }


def mamba2_config() -> dict:
    """Eight 64-wide SSM heads in one group, a tied head, no step clipping."""
    return {
        "model_type": "mamba2",
        "architectures": ["Mamba2ForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "num_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2 * WIDTH,
        "state_size": 16,
        "num_hidden_layers": 2,
        "layer_norm_epsilon": 1e-5,
        "conv_kernel": 4,
        "n_groups": 1,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_limit": [0.0, float("inf")],
        "time_step_rank": "auto",
        "tie_word_embeddings": True,
        **_IDS,
    }


def _wrapped(model_type: str, architecture: str, text: dict) -> dict:
    """A vision-language config as published, holding the text model's config (the vision tower is not built)."""
    shared = {key: text[key] for key in ("vocab_size", "eos_token_id", "pad_token_id", "torch_dtype")}
    return {**shared, "model_type": model_type, "architectures": [architecture], "text_config": text}


# Families checked untrained in f32 against llama.cpp, beside UNTRAINED_FAMILIES.
TEXT_FAMILIES = {
    "openelm": openelm_config,
    "dbrx": dbrx_config,
    "minicpm3": minicpm3_config,
    "exaone_moe": exaone_moe_config,
    # AFMoE: a dense first layer, then sigmoid top-2 of four experts (biased selection) beside a shared one; layers
    # 1-3 sliding over 8 positions with rotary embeddings, the 4th global without.
    "afmoe": lambda: _generic(
        "afmoe",
        "AfmoeForCausalLM",
        num_hidden_layers=4,
        head_dim=64,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        sliding_window=8,
        moe_intermediate_size=WIDTH,
        num_experts=4,
        num_experts_per_tok=2,
        num_shared_experts=1,
        num_dense_layers=1,
        route_norm=True,
        route_scale=1.5,
        tie_word_embeddings=False,
    ),
    # MiMo-V2-Flash: a global first layer (four key/value heads, base 1e6) then sliding ones (two, base 1e4, window 8),
    # 96-wide keys and 64-wide values scaled by 0.7, sinks in both, sigmoid top-2 of four experts after a dense layer.
    "mimo_v2_flash": lambda: _generic(
        "mimo_v2_flash",
        "MiMoV2FlashForCausalLM",
        num_hidden_layers=3,
        num_key_value_heads=4,
        swa_num_key_value_heads=2,
        swa_num_attention_heads=4,
        head_dim=96,
        swa_head_dim=96,
        v_head_dim=64,
        swa_v_head_dim=64,
        partial_rotary_factor=0.5,
        swa_rope_theta=10000.0,
        rope_theta=1000000.0,
        hybrid_layer_pattern=[0, 1, 1],
        moe_layer_freq=[0, 1, 1],
        sliding_window_size=8,
        add_swa_attention_sink_bias=True,
        add_full_attention_sink_bias=True,
        attention_value_scale=0.7,
        layernorm_epsilon=1e-5,
        n_routed_experts=4,
        n_shared_experts=None,
        num_experts_per_tok=2,
        moe_intermediate_size=WIDTH,
        routed_scaling_factor=None,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        norm_topk_prob=True,
        n_group=1,
        topk_group=1,
        tie_word_embeddings=False,
    ),
    # Apertus: per-head query/key norms, an up/down MLP through xIELU.
    "apertus": lambda: _generic(
        "apertus",
        "ApertusForCausalLM",
        mlp_bias=False,
        attention_bias=False,
        post_norm=False,
        qk_norm=True,
        hidden_act="xielu",
        tie_word_embeddings=False,
    ),
    "mamba2": mamba2_config,
    "step3p5": step3p5_config,
    "kimi_linear": kimi_linear_config,
    # PLaMo 2: Mamba 2, attention, Mamba 2, attention (eight 64-wide SSM heads; four query heads over two).
    "plamo2": lambda: {
        "model_type": "plamo2",
        "architectures": ["Plamo2ForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size_per_head": 64,
        "intermediate_size": WIDTH,
        "mamba_num_heads": 8,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_step": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        **_IDS,
    },
    # RWKV-7: four 64-wide wkv heads, low-rank decay, learning-rate, value-mix and gate projections.
    "rwkv7": lambda: {
        "model_type": "rwkv7",
        "architectures": ["RWKV7ForCausalLM"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "num_hidden_layers": 2,
        "head_dim": 64,
        "norm_eps": 1e-5,
        "a_low_rank_dim": 32,
        "v_low_rank_dim": 16,
        "gate_low_rank_dim": 64,
        "decay_low_rank_dim": 32,
        "tie_word_embeddings": False,
        **_IDS,
    },
    # PLaMo (1): eight query heads over two key/value heads, tiled (n_shared_head 4).
    "plamo": lambda: _generic("plamo", "PlamoForCausalLM", num_attention_heads=8, n_shared_head=4),
    # PLaMo 3: four layers, the 4th global (rope base 1e6), the others sliding over 8 positions (base 1e4).
    "plamo3": lambda: _generic(
        "plamo3",
        "Plamo3ForCausalLM",
        num_hidden_layers=4,
        head_dim=64,
        window_size=7,
        sliding_window_pattern=4,
        rope_theta=1000000.0,
        rope_local_theta=10000.0,
        tie_word_embeddings=True,
    ),
    # Jamba: Mamba, attention, Mamba, attention; both experts of two weighed in the 2nd and 4th layers (all chosen, so
    # mlx_lm's softmax over the chosen is llama.cpp's over all).
    "jamba": lambda: _generic(
        "jamba",
        "JambaForCausalLM",
        num_hidden_layers=4,
        attn_layer_offset=1,
        attn_layer_period=2,
        expert_layer_offset=1,
        expert_layer_period=2,
        num_experts=2,
        num_experts_per_tok=2,
        mamba_d_conv=4,
        mamba_d_state=16,
        mamba_expand=2,
        mamba_dt_rank="auto",
        mamba_proj_bias=False,
        mamba_conv_bias=True,
        tie_word_embeddings=True,
    ),
    # Qwen (1): a fused query/key/value with biases, an MLP of intermediate_size / 2.
    "qwen": lambda: {
        "model_type": "qwen",
        "architectures": ["QWenLMHeadModel"],
        "vocab_size": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "kv_channels": 64,
        "intermediate_size": 2 * WIDTH,
        "layer_norm_epsilon": 1e-6,
        "max_position_embeddings": 256,
        "no_bias": True,
        **_IDS,
    },
    # LLaVA's language model, which mlx_lm runs as llama.
    "llava": lambda: _wrapped(
        "llava",
        "LlavaForConditionalGeneration",
        {**UNTRAINED_FAMILIES["xverse"](), "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    ),
    # Kimi-VL and Kimi K2.5: DeepSeek V3's language model (latent attention, sigmoid experts beside a shared one).
    "kimi_vl": lambda: _wrapped(
        "kimi_vl", "KimiVLForConditionalGeneration", {**kimi_k2_config(), "model_type": "deepseek_v3"}
    ),
    "kimi_k25": lambda: _wrapped("kimi_k25", "KimiK25ForConditionalGeneration", kimi_k2_config()),
}


# RWKV-7's token-shift mixes, key scales, bonus and per-head norm, which mlx_lm starts at zero (its norm's weight too).
_RWKV7_ZEROS = tuple(f".attn.{name}" for name in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "k_k", "k_a", "r_k"))
_RWKV7_ZEROS += (".attn.g_norm.weight", ".ffn.x_k")


def vary_activation_settings(folder: Path, seed: int) -> None:
    """Give Apertus' xIELU settings, and RWKV-7's mixes and scales, a different value in each layer and channel, as
    mlx_lm starts them all alike, so that a setting written for the wrong layer changes the logits; a model without
    them is left as it is."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    rng = np.random.default_rng(seed)
    names = [name for name in weights if ".act_fn.alpha_" in name or name.endswith((".act_fn.beta", *_RWKV7_ZEROS))]
    for name in names:
        shape = weights[name].shape if name.endswith(_RWKV7_ZEROS) else ()
        weights[name] = weights[name] + mx.array(rng.uniform(-0.3, 0.3, shape), dtype=weights[name].dtype)
    if names:
        mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})
