"""What the MLX benchmarks train on: seeded token rows and a fresh copy of the tiny model with LoRA on it."""

from __future__ import annotations

from pathlib import Path


def token_rows(count: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Seeded random rows of exactly `length` ids, avoiding the special ids 0-4."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(5, vocab_size, size=(count, length)).tolist()


def fresh_lora_model(folder: Path, rank: int, seed: int):
    import mlx.core as mx

    from unsloth_zoo.mlx import apply_lora, load_model

    model, tokenizer = load_model(folder)
    mx.random.seed(seed)
    if rank > 0:
        apply_lora(model, rank=rank, alpha=2 * rank)
    return model, tokenizer
