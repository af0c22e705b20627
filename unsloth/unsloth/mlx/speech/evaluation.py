# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper's evaluation as transformers' `Seq2SeqTrainer` runs it: the eval loss (each batch's token mean, credited
with the eval batch size, a short last batch too) and `compute_metrics` on `EvalPrediction(predictions=(logits, encoder_last_hidden_state),
label_ids=labels)`, or with `predict_with_generate` on the ids Whisper's `generate` gives (`generation.py`), padded across batches with
-100 as transformers pads them; `trainer.predict(test_dataset)` returns the same pass as a `PredictionOutput`."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, List, NamedTuple, Optional

import mlx.core as mx
import numpy as np

from .generation import DEFAULT_MAX_LENGTH, generate_ids, new_token_budget, resolve_decoding, whisper_prompt
from .training import IGNORED, WhisperRows, whisper_loss

# The generation keywords `trainer.predict(test_dataset, **gen_kwargs)` honours; any other is refused by name.
PREDICT_KEYWORDS = ("max_length", "max_new_tokens", "num_beams", "length_penalty", "early_stopping", "do_sample")


def _padded(arrays: List[np.ndarray], fill: float) -> np.ndarray:
    """Arrays of (rows, length, ...) stacked into one, their length axis padded to the longest with `fill`."""
    width = max(array.shape[1] for array in arrays)
    padded = [
        np.pad(array, [(0, 0), (0, width - array.shape[1])] + [(0, 0)] * (array.ndim - 2), constant_values=fill)
        for array in arrays
    ]
    return np.concatenate(padded, axis=0)


def _pad_id(trainer: Any) -> int:
    """`Seq2SeqTrainer._pad_tensors_to_max_len`'s padding: the processing class's, else the model config's."""
    owner = getattr(trainer, "processing_class", None)
    if owner is not None and hasattr(owner, "pad_token_id"):
        return owner.pad_token_id if owner.pad_token_id is not None else owner.eos_token_id
    return int(trainer.model.config.pad_token_id)


def _padded_to(rows: List[List[int]] | np.ndarray, width: int, fill: int) -> np.ndarray:
    longest = max([width, *(len(row) for row in rows)])
    out = np.full((len(rows), longest), fill, dtype=np.int64)
    for slot, row in enumerate(rows):
        out[slot, : len(row)] = row
    return out


def _requested(requested: Optional[dict]) -> dict:
    chosen = {name: value for name, value in (requested or {}).items() if value is not None}
    unknown = sorted(set(chosen) - set(PREDICT_KEYWORDS))
    if unknown:
        raise NotImplementedError(
            f"trainer.predict on MLX Whisper takes {', '.join(PREDICT_KEYWORDS)}; it cannot honour {', '.join(unknown)}"
        )
    return chosen


def generated_batch(trainer: Any, mels: np.ndarray, labels: np.ndarray, requested: Optional[dict] = None) -> tuple:
    """One eval batch's ids as `Seq2SeqTrainer.prediction_step` gets them from Whisper's `generate` (greedy, or beam
    search with `generation_num_beams`), and its labels, each padded to the model's generation max_length;
    `requested` (predict's keywords) comes before the training arguments, as in `Seq2SeqTrainer.predict`."""
    args, model = trainer.args, trainer.model
    settings = model.generation_config
    chosen = _requested(requested)
    beams = chosen.get("num_beams", args.generation_num_beams)
    if beams is not None:
        chosen["num_beams"] = beams
    prompt = whisper_prompt(settings)
    max_length, max_new = chosen.pop("max_length", None), chosen.pop("max_new_tokens", None)
    if max_length is None and max_new is None:
        max_length, max_new = args.generation_max_length, settings.max_new_tokens
    if max_length is None:
        max_length = settings.max_length
    else:
        max_new = None
    new_tokens = new_token_budget(model.config.max_target_positions, len(prompt), max_length, max_new)
    rows = generate_ids(model, mels, resolve_decoding(settings, prompt, new_tokens, chosen))
    generated = _padded_to(rows, 0, settings.pad_token_id)
    width, fill = settings.max_length or DEFAULT_MAX_LENGTH, _pad_id(trainer)
    return _padded_to(list(generated), width, fill), _padded_to(list(labels), width, fill)


def _batch(rows: WhisperRows, indices: range, pad_token: int) -> tuple:
    width = max(len(rows.rows[index]) for index in indices)
    tokens = np.full((len(indices), width), pad_token, dtype=np.int32)
    weights = np.zeros((len(indices), width), dtype=np.float32)
    for slot, index in enumerate(indices):
        tokens[slot, : len(rows.rows[index])] = rows.rows[index]
        weights[slot, : len(rows.masks[index])] = rows.masks[index]
    mels = np.concatenate([rows.mels[index] for index in indices], axis=0)
    return tokens, weights, mels


def _labels(tokens: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The collator's labels back: each position after the start token, -100 where the loss skipped it."""
    return np.where(weights[:, 1:] > 0, tokens[:, 1:], IGNORED).astype(np.int64)


class WhisperPass(NamedTuple):
    """One pass over eval or test rows: the mean loss, the predictions and labels as transformers pads them."""

    loss: float
    predictions: Any
    label_ids: Optional[np.ndarray]
    runtime: float
    batches: int


def run_whisper_rows(trainer: Any, rows: WhisperRows, predict: bool, requested: Optional[dict] = None) -> WhisperPass:
    """Each batch's loss and, when `predict`, its generated ids (predict_with_generate) or its logits and encoder
    states, as `Seq2SeqTrainer.prediction_step` returns them; `requested` is predict's generation keywords."""
    model, size = trainer.model, trainer.args.per_device_eval_batch_size
    pad_token = int(model.config.pad_token_id)
    generate = bool(getattr(trainer.args, "predict_with_generate", False))
    model.eval()
    start = time.time()
    row_losses: List[float] = []
    logits, hidden, labels = [], [], []
    batches = 0
    for begin in range(0, len(rows.mels), size):
        indices = range(begin, min(begin + size, len(rows.mels)))
        tokens, weights, mels = _batch(rows, indices, pad_token)
        lengths = mx.array([len(rows.rows[index]) for index in indices])
        loss, _ = whisper_loss(model, mx.array(tokens), lengths, mx.array(weights), mx.array(mels))
        # transformers repeats each batch's mean eval_batch_size times, a short last batch's included.
        row_losses += [loss.item()] * size
        if predict and generate:
            ids, padded_labels = generated_batch(trainer, mels, _labels(tokens, weights), requested)
            logits.append(ids)
            labels.append(padded_labels)
        elif predict:
            encoded = model.encoder(mx.array(mels).astype(model.dtype))
            logits.append(np.array(model.decoder(mx.array(tokens[:, :-1]), encoded)[0].astype(mx.float32)))
            hidden.append(np.array(encoded.astype(mx.float32)))
            labels.append(_labels(tokens, weights))
        batches += 1
        trainer._fire("on_prediction_step")
    model.train()
    predictions: Any = None
    if predict:
        predictions = _padded(logits, IGNORED) if generate else (_padded(logits, IGNORED), _padded(hidden, IGNORED))
    label_ids = _padded(labels, IGNORED) if predict else None
    loss = math.fsum(row_losses) / len(row_losses)
    return WhisperPass(loss, predictions, label_ids, time.time() - start, batches)


def _metrics(passed: WhisperPass, rows: int, prefix: str, compute_metrics: Optional[Callable[[Any], dict]]) -> dict:
    """transformers' metrics for a pass: the loss, compute_metrics' results and the speeds, each under `prefix`."""
    metrics = {f"{prefix}_loss": passed.loss}
    if compute_metrics is not None:
        from transformers import EvalPrediction

        prediction = EvalPrediction(predictions=passed.predictions, label_ids=passed.label_ids)
        metrics.update({f"{prefix}_{name}": value for name, value in compute_metrics(prediction).items()})
    metrics[f"{prefix}_runtime"] = round(passed.runtime, 4)
    if passed.runtime > 0:
        metrics[f"{prefix}_samples_per_second"] = round(rows / passed.runtime, 3)
        metrics[f"{prefix}_steps_per_second"] = round(passed.batches / passed.runtime, 3)
    return metrics


def evaluate_whisper(trainer: Any, rows: WhisperRows, compute_metrics: Optional[Callable[[Any], dict]]) -> dict:
    """Eval loss (and compute_metrics' results, prefixed `eval_`) over `rows`, logged and handed to callbacks."""
    passed = run_whisper_rows(trainer, rows, predict=compute_metrics is not None)
    metrics = _metrics(passed, len(rows.mels), "eval", compute_metrics)
    trainer.log(metrics)
    trainer._fire("on_evaluate", metrics=metrics)
    return metrics


def predict_whisper(trainer: Any, rows: WhisperRows, prefix: str, requested: dict) -> Any:
    """`Seq2SeqTrainer.predict`'s `PredictionOutput`: predictions, label_ids and metrics named `{prefix}_...`."""
    from transformers.trainer_utils import PredictionOutput

    passed = run_whisper_rows(trainer, rows, predict=True, requested=requested)
    metrics = _metrics(passed, len(rows.mels), prefix, getattr(trainer, "compute_metrics", None))
    trainer._fire("on_predict", metrics=metrics)
    return PredictionOutput(predictions=passed.predictions, label_ids=passed.label_ids, metrics=metrics)
