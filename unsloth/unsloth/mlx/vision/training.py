# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The MLX trainer with `UnslothVisionDataCollator`: rows encoded once by the collator, batches with their images.

The backend batches token rows as for text; this view also keeps each row's image features, and the step
function gathers the features of the rows a batch read, runs the model on tokens and images together, and
weighs the loss by the collator's answer masks.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from unsloth_zoo.mlx.chunked_loss import call_token_scores, settle_call_verdict
from unsloth_zoo.mlx.data import TokenizedRows
from unsloth_zoo.mlx.trainer import per_target, weighted_by_count

from ..training.train_data import TrainRows, columns
from .collator import UnslothVisionDataCollator, pad_frames, pad_tokens, per_token_features
from .backend import AUDIO_FEATURES, causal_logits, check_family, tower_call_groups, vision_tower


class VisionRows(NamedTuple):
    rows: TokenizedRows
    masks: List[np.ndarray]
    features: List[Dict[str, np.ndarray]]


def vision_collator(collator: Any) -> Optional[UnslothVisionDataCollator]:
    return collator if isinstance(collator, UnslothVisionDataCollator) else None


def _rows(dataset: Any) -> List[Any]:
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return [dataset[index] for index in range(len(dataset))]
    raise ValueError("UnslothVisionDataCollator on MLX needs a dataset with a length (a list or a datasets.Dataset)")


# The columns a vision notebook's rows carry: conversations whose parts hold the images, or an images column.
VISION_COLUMNS = ("messages", "conversations", "images", "image")


def implied_collator(
    model: Any, processor: Any, data_collator: Any, dataset: Any
) -> Optional[UnslothVisionDataCollator]:
    """The collator upstream builds itself when a vision model's conversation rows come without one; else None."""
    if data_collator is not None or dataset is None or vision_tower(model) is None:
        return None
    if not hasattr(processor, "image_processor") or not set(VISION_COLUMNS) & set(columns(dataset)):
        return None
    return UnslothVisionDataCollator(model, processor)


def settle_vision_arguments(collator: UnslothVisionDataCollator, config: Any) -> None:
    """Agree the collator and the trainer's arguments: the collator's max_seq_length wins over the arguments', an
    explicit completion_only_loss in the arguments over the collator's, the arguments' pad_to_multiple_of over the
    collator's; `args.image_size` reads the collator's resize."""
    if collator.max_seq_length is None:
        collator.max_seq_length = int(config.max_seq_length)
    config.max_seq_length = collator.max_seq_length
    if getattr(config, "completion_only_loss", None) is not None:
        collator.completion_only_loss = bool(config.completion_only_loss)
    config.completion_only_loss = collator.completion_only_loss
    # The trainer pads its own batches, so a multiple set on the collator reaches it through the arguments.
    if collator.pad_to_multiple_of and not getattr(config, "pad_to_multiple_of", None):
        config.pad_to_multiple_of = collator.pad_to_multiple_of
    config.image_size = collator.resize


def encode_vision_rows(collator: UnslothVisionDataCollator, dataset: Any, config: Any) -> VisionRows:
    """Every row through the collator once, after the collator and the arguments agree."""
    settle_vision_arguments(collator, config)
    encoded = [collator.encode(row) for row in _rows(dataset)]
    if not encoded:
        raise ValueError("the training dataset has no rows")
    return VisionRows(
        TokenizedRows([row.ids for row in encoded]), [row.mask for row in encoded], [row.features for row in encoded]
    )


def refuse_vision_eval(eval_dataset: Any) -> None:
    if eval_dataset is not None:
        raise NotImplementedError(
            "UnslothVisionDataCollator on MLX trains without an eval_dataset: the evaluation loss would be "
            "computed without the images; build the trainer without eval_dataset"
        )


class VisionTrainRows(TrainRows):
    """Training rows with each source row's image features; remembers which rows the last batch read."""

    def __init__(self, source: TokenizedRows, masks: List[np.ndarray], features: List[Dict[str, np.ndarray]]):
        super().__init__(source)
        self.features = features
        self.token_features = per_token_features([len(mask) for mask in masks], features)
        self.last_read: List[int] = []
        self.set_masks(masks)

    def take_read_masks(self, width: int) -> np.ndarray:
        self.last_read = list(self._read)
        return super().take_read_masks(width)

    def read_features(self, indices: List[int], width: int) -> Dict[str, mx.array]:
        """The features of source rows `indices`, joined along the first axis in that order; a per-token feature
        right-padded with zeros to the batch's `width`, as the tokens are, and audio features to the longest clip."""
        joined: Dict[str, List[np.ndarray]] = {}
        for index in indices:
            for name, value in self.features[index].items():
                if name in self.token_features:
                    value = pad_tokens(value, width)
                joined.setdefault(name, []).append(value)
        for name in [name for name in joined if name.startswith(AUDIO_FEATURES)]:
            joined[name] = pad_frames(joined[name])
        return {name: mx.array(np.concatenate(values, axis=0)) for name, values in joined.items()}


def _logits_call(model: Any, tokens: mx.array, features: Dict[str, mx.array], token_features: frozenset) -> Any:
    """mlx-vlm's own call for the logits of every position but the last, as a function of nothing."""
    extras = {name: value[:, :-1] if name in token_features else value for name, value in features.items()}
    pixel_values = extras.pop("pixel_values", None)
    return lambda: causal_logits(model, tokens[:, :-1], pixel_values, extras)


def vision_loss(
    model: Any,
    tokens: mx.array,
    lengths: mx.array,
    weights: mx.array,
    features: Dict[str, mx.array],
    token_features: frozenset = frozenset(),
) -> Any:
    """Mean next-token loss over the masked targets inside each row's length, and their count."""
    targets = tokens[:, 1:]
    # mlx-vlm's own call, its language model's head then taken a chunk of positions at a time.
    scores = call_token_scores(model.language_model, _logits_call(model, tokens, features, token_features), targets)
    log_probs = scores.log_probs
    positions = mx.arange(targets.shape[1])[None, :]
    keep = (positions < (lengths[:, None] - 1)) * weights[:, 1:]
    count = keep.sum()
    return -(log_probs * keep).sum() / mx.maximum(count, 1), count


def _combined(calls: Iterator[Tuple[Any, Any, Any]]) -> Tuple[Any, Any, Any]:
    """The (mean loss, target count, gradients) of one batch from those of the calls it ran as, weighed by target
    count as the trainer weighs accumulated micro-batches."""
    summed_loss, targets, summed_grads = mx.array(0.0), mx.array(0), None
    for loss, count, grads in calls:
        loss, grads = weighted_by_count(loss, grads, count)
        summed_grads = grads if summed_grads is None else tree_map(mx.add, summed_grads, grads)
        summed_loss, targets = summed_loss + loss, targets + count
        # Materialised so only one call's graph is held at a time.
        mx.eval(summed_grads, summed_loss, targets)
    loss, grads = per_target(summed_loss, summed_grads, targets)
    return loss, targets, grads


def vision_step(model: Any, rows: VisionTrainRows) -> Any:
    """The trainer's forward/backward for image batches (uncompiled: each batch's images differ in shape); a batch
    the family's forward pass cannot run in one call (`tower_call_groups`) runs as several, combined as one batch."""
    check_family(model)
    loss_and_grad = nn.value_and_grad(model, vision_loss)

    def run(indices: List[int], tokens: Any, lengths: Any, weights: Any) -> Tuple[Any, Any, Any]:
        features = rows.read_features(indices, tokens.shape[1])
        settle_call_verdict(model.language_model, _logits_call(model, tokens, features, rows.token_features))
        (loss, count), grads = loss_and_grad(model, tokens, lengths, weights, features, rows.token_features)
        return loss, count, grads

    def run_group(group: List[int], tokens: Any, lengths: Any, weights: Any) -> Tuple[Any, Any, Any]:
        take = mx.array(group)
        return run([rows.last_read[position] for position in group], tokens[take], lengths[take], weights[take])

    def forward_backward(tokens: Any, lengths: Any) -> Any:
        weights = mx.array(rows.take_read_masks(tokens.shape[1]))
        groups = tower_call_groups(model, [rows.features[index] for index in rows.last_read])
        if len(groups) == 1:
            return run(rows.last_read, tokens, lengths, weights)
        return _combined(run_group(group, tokens, lengths, weights) for group in groups)

    return forward_backward
