# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Datasets as notebooks hand them to the trainer, made into what the MLX backend reads.

A streamed `IterableDataset` is read for as many rows as `max_steps` needs (again from the start when it runs
out, as Hugging Face's trainer does); with `skip_prepare_dataset` the `input_ids` are used as they are and a
`labels` column masked with -100 becomes the loss mask; image rows are refused by name.
"""

from __future__ import annotations

import itertools
from typing import Any, List, NamedTuple, Optional

import numpy as np

from unsloth_zoo.mlx.data import TokenizedRows

IGNORE_INDEX = -100
IMAGE_COLUMNS = ("images", "image")


class PreparedRows(NamedTuple):
    rows: Any
    streamed: bool
    masks: Optional[List[np.ndarray]]


def is_streamed(dataset: Any) -> bool:
    """A `datasets.IterableDataset` (or any iterable without a length): rows can only be read in order."""
    return dataset is not None and hasattr(dataset, "__iter__") and not hasattr(dataset, "__len__")


def _columns(dataset: Any) -> List[str]:
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return list(names)
    if isinstance(dataset, (list, tuple)) and dataset and isinstance(dataset[0], dict):
        return list(dataset[0])
    features = getattr(dataset, "features", None)
    return list(features) if features else []


def refuse_images(*datasets: Any) -> None:
    for dataset in datasets:
        found = [name for name in IMAGE_COLUMNS if name in _columns(dataset)]
        if found:
            raise NotImplementedError(
                f"UnslothTrainer on MLX trains on text only, and this dataset has an {found[0]!r} column: vision "
                "fine-tuning (FastVisionModel, UnslothVisionDataCollator, completion_only_loss on images) runs on "
                "CUDA Unsloth only; drop the images or train the language model on text rows"
            )


def _streamed_rows(dataset: Any, config: Any) -> List[Any]:
    if config.max_steps is None or config.max_steps <= 0:
        raise ValueError(
            "a streamed dataset (IterableDataset) has no length, so set max_steps > 0 to say how long to train"
        )
    needed = int(config.max_steps) * int(config.per_device_train_batch_size) * int(config.gradient_accumulation_steps)
    rows = list(itertools.islice(dataset, needed))
    if not rows:
        raise ValueError("the streamed training dataset yielded no rows")
    # Read again from the start until the steps are covered, as Hugging Face's trainer re-iterates.
    while len(rows) < needed:
        rows.extend(itertools.islice(dataset, needed - len(rows)))
    return rows


def _column(rows: Any, name: str) -> List[Any]:
    if hasattr(rows, "column_names"):
        return list(rows[name])
    return [row[name] for row in rows]


def _tokenized(rows: Any, max_seq_length: int) -> PreparedRows:
    if "input_ids" not in _columns(rows):
        raise ValueError(
            "dataset_kwargs={'skip_prepare_dataset': True} needs an already tokenized dataset with an input_ids "
            f"column; this one has {_columns(rows)} (drop skip_prepare_dataset to let the trainer tokenize the text)"
        )
    ids = [list(row)[:max_seq_length] for row in _column(rows, "input_ids")]
    masks = None
    if "labels" in _columns(rows):
        masks = [np.asarray(list(row)[:max_seq_length]) != IGNORE_INDEX for row in _column(rows, "labels")]
    return PreparedRows(TokenizedRows(ids), False, masks)


def prepared_rows(dataset: Any, config: Any, skip_prepare_dataset: bool) -> PreparedRows:
    """The rows the backend tokenizes (or, with skip_prepare_dataset, already tokenized rows and their masks)."""
    if dataset is None:
        return PreparedRows(None, False, None)
    streamed = is_streamed(dataset)
    rows = _streamed_rows(dataset, config) if streamed else dataset
    if skip_prepare_dataset:
        return _tokenized(rows, int(config.max_seq_length))._replace(streamed=streamed)
    return PreparedRows(rows, streamed, None)
