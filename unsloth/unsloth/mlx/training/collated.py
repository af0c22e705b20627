# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A notebook's own data collator on MLX: each row collated once, alone, and its batch converted to a token row.

The collator may return torch tensors, numpy or MLX arrays, or lists. Padding is dropped by the batch's
`attention_mask` (left or right), `labels` masked with -100 become the loss mask, and every other output (pixel
values, audio features, per-token ids) is kept as numpy for a model that reads it. The trainer then batches and
pads these rows itself, so a batch trains as the collator's would, each row unaffected by another's padding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import numpy as np

from unsloth_zoo.mlx.data import EncodeRows, TokenizedRows, tokenize_dataset

from .train_data import IGNORE_INDEX, PreparedRows, columns, describe, is_streamed, only_pads, streamed_rows

IDS, ATTENTION, LABELS = "input_ids", "attention_mask", "labels"
# What a text model's forward pass takes beside the ids and is the same for every unpadded row.
TEXT_NEUTRAL = {"position_ids": "counts 0, 1, 2, ...", "token_type_ids": "is all zeros"}


class CollatedRow(NamedTuple):
    ids: np.ndarray
    # True where the token is a training target.
    mask: np.ndarray
    # Every other output of the collator, one row's worth; a per-token one cut to the kept tokens.
    features: Dict[str, np.ndarray]


def own_collator(collator: Any) -> bool:
    """A collator the trainer calls itself: any callable but the library's padding collators, which it replaces."""
    return collator is not None and not only_pads(collator)


def refuse_masked_language_modeling(collator: Any) -> None:
    """transformers' masked-language-modeling collator trains another objective than next-token prediction."""
    if getattr(collator, "mlm", False):
        raise NotImplementedError(
            f"data_collator={describe(collator)} with mlm=True trains masked-token prediction; the MLX trainer "
            "trains next-token prediction of causal models (use mlm=False)"
        )


def as_numpy(value: Any) -> np.ndarray:
    """A torch tensor, an MLX or numpy array, or a nested list as numpy; bfloat16 widened to float32."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        return (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
    if type(value).__module__.startswith("mlx") and "bfloat16" in str(getattr(value, "dtype", "")):
        import mlx.core as mx

        value = value.astype(mx.float32)
    return np.asarray(value)


def _one_row(name: str, value: np.ndarray, collator: Any) -> np.ndarray:
    if value.ndim == 1:
        value = value[None]
    if value.ndim != 2 or value.shape[0] != 1:
        raise ValueError(f"data_collator={describe(collator)} returned {name} of shape {value.shape} for one row")
    return value


def _text_targets(ids: np.ndarray, labels: Optional[np.ndarray], collator: Any) -> np.ndarray:
    if labels is None:
        return np.ones(len(ids), dtype=bool)
    if labels.shape != ids.shape:
        raise NotImplementedError(
            f"data_collator={describe(collator)} returned labels of {labels.shape[-1]} tokens for {ids.shape[-1]} "
            "input_ids: the labels are not the row's own input_ids, and the MLX trainer trains a causal model to "
            "predict its own next tokens (an encoder-decoder's labels are not supported)"
        )
    mask = labels != IGNORE_INDEX
    if np.any(labels[mask] != ids[mask]):
        raise NotImplementedError(
            f"data_collator={describe(collator)} returned labels that are not the row's own input_ids (masked with "
            f"{IGNORE_INDEX}): the MLX trainer trains a causal model to predict its own next tokens"
        )
    return mask


def collate_row(collator: Callable[[List[Any]], Any], row: Any) -> CollatedRow:
    """`row` through the collator as a batch of one, padding dropped and -100 labels made a mask."""
    batch = collator([row])
    if not isinstance(batch, Mapping) or IDS not in batch:
        found = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise ValueError(
            f"data_collator={describe(collator)} must return a mapping with input_ids; it returned {found}"
        )
    ids = _one_row(IDS, as_numpy(batch[IDS]), collator)
    width = ids.shape[1]
    keep = _one_row(ATTENTION, as_numpy(batch[ATTENTION]), collator)[0] != 0 if ATTENTION in batch else None
    keep = np.ones(width, dtype=bool) if keep is None else keep
    labels = _one_row(LABELS, as_numpy(batch[LABELS]), collator)[0] if batch.get(LABELS) is not None else None
    if labels is not None and labels.shape == (width,):
        labels = labels[keep]
    mask = _text_targets(ids[0][keep], labels, collator)
    features = {}
    for name, value in batch.items():
        if name in (IDS, ATTENTION, LABELS) or value is None:
            continue
        array = as_numpy(value)
        # A value per token (Gemma's token_type_ids, mm_token_type_ids) loses the padding the ids lose.
        padded = not keep.all() and array.shape[:2] == (1, width)
        features[name] = array[:, keep] if padded else array
    return CollatedRow(ids[0][keep].astype(np.int32), mask, features)


def refuse_text_features(rows: List[CollatedRow], collator: Any) -> None:
    """A text model reads token ids only: any other output must be one it would ignore for an unpadded row."""
    for row in rows:
        for name, value in row.features.items():
            neutral = name in TEXT_NEUTRAL and np.array_equal(
                value.reshape(-1), np.arange(value.size) if name == "position_ids" else np.zeros(value.size)
            )
            if not neutral:
                raise NotImplementedError(
                    f"data_collator={describe(collator)} returned {name!r}, which a text model on MLX cannot read; "
                    "load a model with that input through FastVisionModel / FastModel, or drop it from the batch"
                )


def collator_inputs(
    dataset: Any, config: Any, tokenizer: Any = None, formatting_func: Any = None, raw: bool = False
) -> List[Any]:
    """The rows the collator is given: as they are when `raw`, tokenized, or with skip_prepare_dataset, else
    tokenized first into `{"input_ids": ...}`, as TRL prepares text rows before its collator sees them."""
    rows = streamed_rows(dataset, config) if is_streamed(dataset) else dataset
    if raw or getattr(config, "skip_prepare_dataset", False) or IDS in columns(rows):
        return [rows[index] for index in range(len(rows))]
    encode = EncodeRows(
        tokenizer, config.dataset_text_field, formatting_func, int(config.max_seq_length), config.append_eos
    )
    return [{IDS: row.tolist()} for row in tokenize_dataset(rows, encode).rows]


def collate_rows(collator: Any, rows: List[Any]) -> List[CollatedRow]:
    collated = [collate_row(collator, row) for row in rows]
    if not collated:
        raise ValueError("the training dataset has no rows")
    return collated


def collated_text_rows(
    collator: Any, dataset: Any, config: Any, tokenizer: Any, formatting_func: Any = None
) -> PreparedRows:
    """The trainer's text rows and masks from a notebook's own collator (None rows for no dataset)."""
    if dataset is None:
        return PreparedRows(None, False, None)
    rows = collate_rows(collator, collator_inputs(dataset, config, tokenizer, formatting_func))
    refuse_text_features(rows, collator)
    return PreparedRows(TokenizedRows([row.ids for row in rows]), is_streamed(dataset), [row.mask for row in rows])
