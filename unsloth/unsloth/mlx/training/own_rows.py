# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Collators that build their own training rows (vision's), registered here by the layer that provides them.

`training` sits below `vision` in `unsloth/mlx/layers.py`, so the trainer never imports it: `vision.trainer_rows`
registers an `OwnRows` when imported (as loading a vision model or building its collator does), and the trainer
asks this table whether a call's collator, or the one a model implies, encodes its own rows.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Protocol, Tuple

from .train_data import PreparedRows, TrainRows


class OwnRows(Protocol):
    """What the trainer needs from a collator family that encodes rows itself."""

    def collator(self, model: Any, processor: Any, data_collator: Any, dataset: Any) -> Optional[Any]:
        """The collator to train through, given or implied by the model and rows; None when it is not this kind."""

    def encode(self, collator: Any, dataset: Any, eval_dataset: Any, config: Any) -> Tuple[PreparedRows, Any]:
        """The training rows with their masks, and whatever `train_rows` needs beside them."""

    def train_rows(self, rows: Any, encoded: Any) -> TrainRows:
        """The backend's rows (`rows`, as the backend built them) wrapped as the trainer reads them."""

    def step(self, model: Any, rows: Any) -> Callable[..., Any]:
        """The forward/backward the trainer runs on these rows."""


_REGISTERED: List[OwnRows] = []


def register_own_rows(source: OwnRows) -> None:
    """Add `source` once; a module imported twice registers nothing new."""
    if not any(type(known) is type(source) for known in _REGISTERED):
        _REGISTERED.append(source)


def own_rows_collator(model: Any, processor: Any, data_collator: Any, dataset: Any) -> Tuple[Optional[OwnRows], Any]:
    """The registered source and its collator when one claims this call, else (None, None): text rows."""
    for source in _REGISTERED:
        collator = source.collator(model, processor, data_collator, dataset)
        if collator is not None:
            return source, collator
    return None, None


def own_evaluation_rows(source: OwnRows, encoded: Any) -> Optional[PreparedRows]:
    """The evaluation rows a source encoded beside its training rows; None for a source that evaluates nothing."""
    rows = getattr(source, "evaluation_rows", None)
    return None if rows is None else rows(encoded)


def refuse_completion_only_loss(value: Any) -> None:
    """Text rows mask answers through train_on_responses_only, not TRL's completion_only_loss."""
    if value:
        raise NotImplementedError(
            "completion_only_loss=True trains only the answers of a vision model (with UnslothVisionDataCollator) "
            "on MLX; for a text model call train_on_responses_only(trainer) instead"
        )


def refuse_predict_with_generate(source: Optional[OwnRows], value: Any) -> None:
    """Seq2SeqTrainer's generation at evaluation is built for the sources that say so (Whisper's), no other."""
    if value and not getattr(source, "predicts_with_generate", False):
        raise NotImplementedError(
            "predict_with_generate=True is built on MLX for Whisper only (its eval clips transcribed greedily); "
            "this model's evaluation reports eval_loss from its logits, so leave predict_with_generate off"
        )
