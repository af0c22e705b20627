# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper's rows, registered with the trainer (`training.own_rows`), which sits below this layer, when the
`speech` package is first imported."""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Tuple

from ..training.own_rows import register_own_rows
from ..training.train_data import PreparedRows, TrainRows
from .csm_training import CsmOwnRows
from .evaluation import evaluate_whisper, predict_whisper
from .training import WhisperRows, WhisperTrainRows, encode_whisper_rows, whisper_step
from .whisper import is_whisper


class WhisperCollator(NamedTuple):
    """The notebook's collator with the decoder's start and padding tokens, which its labels leave out."""

    collate: Callable[[List[Any]], Any]
    start_token: int
    pad_token: int

    def __call__(self, rows: List[Any]) -> Any:
        return self.collate(rows)


class WhisperSplits(NamedTuple):
    train: WhisperRows
    evaluation: Optional[WhisperRows]


class WhisperOwnRows:
    """The notebook's speech collator on a Whisper model: log-mel features and labels, trained by mlx-audio's model."""

    # Seq2SeqTrainingArguments(predict_with_generate=True) evaluates on greedy transcriptions (`generation.py`).
    predicts_with_generate = True

    def collator(self, model: Any, processor: Any, data_collator: Any, dataset: Any) -> Optional[Any]:
        if not is_whisper(model):
            return None
        if data_collator is None:
            raise NotImplementedError(
                "a Whisper model trains through the notebook's data collator (input_features and labels); pass "
                "data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer)"
            )
        return WhisperCollator(data_collator, model.config.decoder_start_token_id, model.config.pad_token_id)

    def encode(self, collator: Any, dataset: Any, eval_dataset: Any, config: Any) -> Tuple[PreparedRows, WhisperSplits]:
        train, evaluation = (
            None
            if rows is None
            else encode_whisper_rows(collator, rows, config, collator.start_token, collator.pad_token)
            for rows in (dataset, eval_dataset)
        )
        assert train is not None  # the trainer always has a train dataset; only the eval one is optional
        return PreparedRows(train.rows, False, train.masks), WhisperSplits(train, evaluation)

    def evaluation_rows(self, encoded: WhisperSplits) -> Optional[PreparedRows]:
        evaluation = encoded.evaluation
        return None if evaluation is None else PreparedRows(evaluation.rows, False, evaluation.masks)

    def train_rows(self, rows: Any, encoded: WhisperSplits) -> TrainRows:
        return WhisperTrainRows(rows, encoded.train.masks, encoded.train.mels)

    def evaluate(self, trainer: Any, encoded: WhisperSplits) -> dict:
        if encoded.evaluation is None:
            raise ValueError("evaluation needs an eval_dataset: pass eval_dataset= to the trainer")
        return evaluate_whisper(trainer, encoded.evaluation, getattr(trainer, "compute_metrics", None))

    def predict(self, trainer: Any, dataset: Any, prefix: str, requested: dict) -> Any:
        """`Seq2SeqTrainer.predict(test_dataset)`: the rows through the notebook's collator, then one pass over them."""
        collator = trainer.vision_collator
        rows = encode_whisper_rows(collator, dataset, trainer.args, collator.start_token, collator.pad_token)
        return predict_whisper(trainer, rows, prefix, requested)

    def step(self, model: Any, rows: Any) -> Callable[..., Any]:
        return whisper_step(model, rows)


register_own_rows(WhisperOwnRows())
register_own_rows(CsmOwnRows())
