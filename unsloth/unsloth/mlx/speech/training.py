# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper's training rows and step: the notebook's collator gives each row its log-mel features and labels; the
decoder reads `decoder_start_token_id` then the labels, and learns each label from the tokens before it, as
transformers' `WhisperForConditionalGeneration` computes its loss."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.data import TokenizedRows

from ..training.collated import as_numpy, collator_inputs
from ..training.train_data import TrainRows

IGNORED = -100


class WhisperRows(NamedTuple):
    rows: TokenizedRows
    masks: List[np.ndarray]
    mels: List[np.ndarray]


def encode_whisper_rows(collator: Any, dataset: Any, config: Any, start_token: int, pad_token: int) -> WhisperRows:
    """Each row through the notebook's collator once: the decoder's tokens, the label mask and the mel frames."""
    ids, masks, mels = [], [], []
    for row in collator_inputs(dataset, config, raw=True):
        batch = collator([row])
        labels = as_numpy(batch["labels"])[0].astype(np.int64)
        features = as_numpy(batch["input_features"])[0]
        kept = labels != IGNORED
        ids.append(np.concatenate([[start_token], np.where(kept, labels, pad_token)]))
        masks.append(np.concatenate([[False], kept]))
        # transformers' features are (mel bins, frames); mlx-audio's model reads frames first.
        mels.append(np.asarray(features, dtype=np.float32).T[None])
    return WhisperRows(TokenizedRows(ids), masks, mels)


class WhisperTrainRows(TrainRows):
    """Training rows with each source row's mel frames; remembers which rows the last batch read."""

    def __init__(self, source: TokenizedRows, masks: List[np.ndarray], mels: List[np.ndarray]) -> None:
        super().__init__(source)
        self.mels = mels
        self.last_read: List[int] = []
        self.set_masks(masks)

    def take_read_masks(self, width: int) -> np.ndarray:
        self.last_read = list(self._read)
        return super().take_read_masks(width)

    def read_mels(self) -> mx.array:
        return mx.array(np.concatenate([self.mels[index] for index in self.last_read], axis=0))


def whisper_loss(model: Any, tokens: mx.array, lengths: mx.array, weights: mx.array, mels: mx.array) -> Any:
    """Mean cross-entropy over the labels inside each row's length, and their count."""
    logits = model(mels.astype(model.dtype), tokens[:, :-1]).astype(mx.float32)
    targets = tokens[:, 1:]
    scores = nn.losses.cross_entropy(logits, targets, reduction="none")
    positions = mx.arange(targets.shape[1])[None, :]
    keep = (positions < (lengths[:, None] - 1)) * weights[:, 1:]
    count = keep.sum()
    return (scores * keep).sum() / mx.maximum(count, 1), count


def whisper_step(model: Any, rows: WhisperTrainRows) -> Any:
    """The trainer's forward/backward for Whisper batches."""
    loss_and_grad = nn.value_and_grad(model, whisper_loss)

    def forward_backward(tokens: Any, lengths: Any) -> Tuple[Any, Any, Dict]:
        weights = mx.array(rows.take_read_masks(tokens.shape[1]))
        (loss, count), grads = loss_and_grad(model, tokens, lengths, weights, rows.read_mels())
        return loss, count, grads

    return forward_backward
