"""A tiny Gemma 4 with its mixture-of-experts block (the 26B-A4B's layout) for GGUF export to llama.cpp's gemma4.

Each layer runs its dense MLP and, beside it, experts chosen by a router that norms and scales its input per
channel and scales each chosen expert's output; the 26B has neither per-layer embeddings nor layers reusing keys and
values. mlx_lm starts both router scales at one, so the kit draws them, and a scale lost on the way would show.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.kits.tiny_gguf_families import WIDTH, gemma4_text_config
from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model


def gemma4_moe_config() -> dict:
    """Four experts 128 wide, two per token, in every layer; the E2B tiny config's attention otherwise."""
    return {
        **gemma4_text_config(),
        "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": 0,
        "enable_moe_block": True,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": WIDTH // 2,
    }


def draw_router_scales(folder: Path, seed: int) -> None:
    """Give the routers' input and per-expert scales values away from one."""
    import mlx.core as mx

    path = folder / "model.safetensors"
    weights = mx.load(str(path))
    rng = np.random.default_rng(seed)
    for name in [name for name in weights if name.endswith((".router.scale", ".router.per_expert_scale"))]:
        weights[name] = mx.array(rng.uniform(0.5, 1.5, weights[name].shape).astype(np.float32))
    mx.save_safetensors(str(path), weights, metadata={"format": "mlx"})


def build_gemma4_moe_model(folder: str | Path, *, seed: int = 0, **overrides) -> Path:
    config = {**gemma4_moe_config(), **overrides}
    folder = build_tiny_hybrid_model(folder, config["model_type"], seed=seed, config=config)
    draw_router_scales(folder, seed)
    return folder
