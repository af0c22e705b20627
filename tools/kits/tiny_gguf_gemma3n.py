"""A tiny Gemma 3n (the published vision-language wrapper around its text model) for GGUF export to llama.cpp's gemma3n.

llama.cpp 0.3.36 fixes what the E2B and E4B share rather than reading it: four AltUp streams with the first active,
Laurel blocks of rank 64, 256-wide per-layer inputs, a softcap of 30, activation sparsity 0.95 in the first ten layers
and 20 layers keeping their own keys and values. The tiny model keeps those and shrinks the rest; its four layers all
keep their keys and values, as every layer below llama.cpp's twentieth does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.kits.tiny_gguf_families import WIDTH
from tools.kits.tiny_hybrid_model import VOCAB_SIZE, build_tiny_hybrid_model

LAYERS = 4


def gemma3n_text_config() -> dict:
    """Sliding and full layers alternating over a short window, every layer sparse as llama.cpp's first ten are."""
    return {
        "model_type": "gemma3n_text",
        "vocab_size": VOCAB_SIZE,
        "vocab_size_per_layer_input": VOCAB_SIZE,
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_kv_shared_layers": 0,
        "rms_norm_eps": 1e-6,
        "sliding_window": 8,
        "max_position_embeddings": 256,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "final_logit_softcapping": 30.0,
        "layer_types": ["sliding_attention", "full_attention"] * (LAYERS // 2),
        "activation_sparsity_pattern": [0.95] * LAYERS,
        "hidden_size_per_layer_input": 256,
        "altup_num_inputs": 4,
        "altup_coef_clip": 120.0,
        "altup_correct_scale": True,
        "altup_active_idx": 0,
        "laurel_rank": 64,
    }


def gemma3n_config(**text: object) -> dict:
    return {
        "model_type": "gemma3n",
        "architectures": ["Gemma3nForConditionalGeneration"],
        "text_config": {**gemma3n_text_config(), **text},
        "eos_token_id": 1,
        "pad_token_id": 0,
        "bos_token_id": None,
        "torch_dtype": "float32",
    }


def draw_correct_output_scales(folder: Path, seed: int) -> None:
    """mlx_lm starts each layer's AltUp output scale at zero, which shuts the per-layer inputs out: draw them."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    rng = np.random.default_rng(seed)
    for name in [name for name in weights if name.endswith(".altup.correct_output_scale")]:
        weights[name] = mx.array(rng.uniform(0.5, 1.5, weights[name].shape).astype(np.float32))
    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})


def build_gemma3n_model(folder: str | Path, *, seed: int = 0, **text: object) -> Path:
    """Write the tiny Gemma 3n (its text config updated by `text`) into `folder` and return its path."""
    folder = build_tiny_hybrid_model(folder, "gemma3n", seed=seed, config=gemma3n_config(**text))
    draw_correct_output_scales(folder, seed)
    return folder
