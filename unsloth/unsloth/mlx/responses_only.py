# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`train_on_responses_only` on MLX: the loss counts only the tokens of the assistant's answers.

The trainer's tokenized rows get a mask each (True from the end of a response marker up to the next instruction
marker), and its step function switches to a loss that weighs tokens by that mask.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.trainer import MLXTrainer

from .. import chat_templates as _cuda_chat_templates

DEFAULT_INSTRUCTION_PART = _cuda_chat_templates.DEFAULT_INSTRUCTION_PART
DEFAULT_RESPONSE_PART = _cuda_chat_templates.DEFAULT_RESPONSE_PART


def _find(ids: np.ndarray, pattern: np.ndarray, start: int) -> int:
    """First index at or after `start` where `pattern` occurs in `ids`, or -1."""
    width = len(pattern)
    for index in range(start, len(ids) - width + 1):
        if ids[index] == pattern[0] and np.array_equal(ids[index : index + width], pattern):
            return index
    return -1


def response_mask(ids: np.ndarray, instruction_ids: np.ndarray, response_ids: np.ndarray) -> np.ndarray:
    """True on every token after a response marker, up to (not including) the next instruction marker."""
    mask = np.zeros(len(ids), dtype=bool)
    position = 0
    while True:
        start = _find(ids, response_ids, position)
        if start < 0:
            return mask
        begin = start + len(response_ids)
        end = _find(ids, instruction_ids, begin)
        end = len(ids) if end < 0 else end
        mask[begin:end] = True
        position = end


def marker_ids(tokenizer: Any, text: str) -> np.ndarray:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if callable(tokenizer) else tokenizer.encode(text)
    if not ids:
        raise ValueError(f"the marker {text!r} tokenizes to nothing")
    return np.asarray(ids, dtype=np.int64)


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


def _masks_for(rows: Sequence[np.ndarray], instruction_ids: np.ndarray, response_ids: np.ndarray) -> List[np.ndarray]:
    return [response_mask(np.asarray(row), instruction_ids, response_ids) for row in rows]


def train_on_responses_only(
    trainer: Any,
    instruction_part: Optional[str] = None,
    response_part: Optional[str] = None,
    num_proc: Any = None,
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
    instruction_ids = marker_ids(trainer.tokenizer, instruction_part)
    response_ids = marker_ids(trainer.tokenizer, response_part)
    masks = _masks_for(trainer.train_rows.source_rows, instruction_ids, response_ids)
    if not any(mask.any() for mask in masks):
        raise ValueError(
            f"no training row contains the response marker {response_part!r}; check instruction_part and response_part"
        )
    trainer.train_rows.set_masks(masks)
    return trainer
