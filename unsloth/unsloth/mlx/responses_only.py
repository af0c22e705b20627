# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`train_on_responses_only` on MLX: the loss counts only the tokens of the assistant's answers.

The trainer's tokenized rows get a mask each (True from the end of a response marker up to the next instruction
marker, found by `response_spans`), and its step function switches to a loss that weighs tokens by that mask.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.trainer import MLXTrainer

from .chat_families import DEFAULT_INSTRUCTION_PART, DEFAULT_RESPONSE_PART
from .response_spans import row_mask


def response_masked_cross_entropy(
    model: Any, tokens: mx.array, lengths: mx.array, weights: mx.array
) -> Tuple[mx.array, mx.array]:
    """Mean next-token loss over targets inside each row's length whose token the mask keeps, and their count."""
    logits = model(tokens[:, :-1])
    targets = tokens[:, 1:]
    positions = mx.arange(targets.shape[1])[None, :]
    # The target at position t is token t+1, so it is kept when token t+1 is part of a response.
    keep = (positions < (lengths[:, None] - 1)) * weights[:, 1:]
    per_token = nn.losses.cross_entropy(logits, targets) * keep
    count = keep.sum()
    return per_token.astype(mx.float32).sum() / mx.maximum(count, 1), count


def train_on_responses_only(
    trainer: Any,
    instruction_part: Optional[str] = None,
    response_part: Optional[str] = None,
    force_match: bool = True,
    num_proc: Any = None,
    last_response_only: bool = False,
) -> Any:
    """Train an UnslothTrainer on responses only; `num_proc` keeps the CUDA signature (masking runs in-process)."""
    if not isinstance(trainer, MLXTrainer) or not hasattr(trainer.train_rows, "set_masks"):
        raise TypeError(f"this train_on_responses_only masks an UnslothTrainer's loss, got {type(trainer).__name__}")
    if trainer.eval_rows:
        raise NotImplementedError(
            "train_on_responses_only on MLX masks the training loss only; the evaluation loss would still count every "
            "token. Build the trainer without eval_dataset to train on responses only."
        )
    instruction_part = DEFAULT_INSTRUCTION_PART if instruction_part is None else instruction_part
    response_part = DEFAULT_RESPONSE_PART if response_part is None else response_part
    masks = [
        np.asarray(row_mask(trainer.tokenizer, row, instruction_part, response_part, force_match, last_response_only))
        for row in trainer.train_rows.source_rows
    ]
    if not any(mask.any() for mask in masks):
        raise ValueError(
            f"no training row contains the response marker {response_part!r}; check instruction_part and response_part"
        )
    trainer.train_rows.set_masks(masks)
    return trainer
