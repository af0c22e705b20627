# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""The trainer's view of a text dataset: token rows, each epoch's batch order, and padded batches with lengths.

A `datasets.Dataset` is tokenized with `map()`, sized by the worker-count policy; a plain list of rows is
tokenized in-process. Padding is cut off by a length per row, never by looking for the pad id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..dataset_num_proc import MAIN_FIRST_MAIN, MAIN_FIRST_REST, get_dataset_num_proc, sized_map

IDS_FIELD = "input_ids"


class TokenizedRows:
    """Token id rows as int32 arrays, with their lengths at hand for batching and token counts."""

    def __init__(self, rows: Sequence[Sequence[int]]) -> None:
        self.rows = [np.asarray(row, dtype=np.int32) for row in rows]
        self.lengths = np.array([len(row) for row in self.rows], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.rows[index]


def _encoder(tokenizer: Any) -> Callable[[List[str]], List[List[int]]]:
    """Batch encoding for a `tokenizers.Tokenizer`, a Hugging Face tokenizer, or mlx_lm's wrapper around one."""
    if hasattr(tokenizer, "encode_batch"):
        return lambda texts: [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    # mlx_lm's TokenizerWrapper is not callable itself; the Hugging Face tokenizer it wraps is.
    callable_tokenizer = tokenizer if callable(tokenizer) else getattr(tokenizer, "_tokenizer", None)
    if callable(callable_tokenizer):
        return lambda texts: list(callable_tokenizer(texts)[IDS_FIELD])
    return lambda texts: [list(tokenizer.encode(text)) for text in texts]


def _formatted_text(formatting_func: Callable[[dict], Any], row: dict) -> str:
    """One row's text from a formatting function, which may return the string or a one-string list."""
    text = formatting_func(row)
    if isinstance(text, (list, tuple)):
        if len(text) != 1:
            raise ValueError(f"formatting_func must return one text per row, got {len(text)}")
        text = text[0]
    if not isinstance(text, str):
        raise TypeError(f"formatting_func must return a str, got {type(text).__name__}")
    return text


class EncodeRows:
    """Turns a columnar batch of rows into `input_ids`; a class so it pickles into `datasets` workers."""

    def __init__(
        self,
        tokenizer: Any,
        text_field: str,
        formatting_func: Optional[Callable[[dict], Any]],
        max_seq_length: int,
        append_eos: bool,
    ) -> None:
        self.tokenizer = tokenizer
        self.text_field = text_field
        self.formatting_func = formatting_func
        self.max_seq_length = max_seq_length
        self.eos_id = getattr(tokenizer, "eos_token_id", None) if append_eos else None

    def _texts(self, batch: Mapping[str, list]) -> Optional[List[str]]:
        if self.formatting_func is not None:
            size = len(next(iter(batch.values())))
            return [_formatted_text(self.formatting_func, {key: batch[key][i] for key in batch}) for i in range(size)]
        if self.text_field in batch:
            return list(batch[self.text_field])
        return None

    def _finish(self, ids: List[int], from_text: bool) -> List[int]:
        ids = list(ids)
        if from_text and self.eos_id is not None and (not ids or ids[-1] != self.eos_id):
            ids.append(self.eos_id)
        return ids[: self.max_seq_length]

    def __call__(self, batch: Mapping[str, list]) -> dict:
        texts = self._texts(batch)
        if texts is not None:
            return {IDS_FIELD: [self._finish(ids, True) for ids in _encoder(self.tokenizer)(texts)]}
        if IDS_FIELD in batch:
            return {IDS_FIELD: [self._finish(ids, False) for ids in batch[IDS_FIELD]]}
        raise KeyError(f"rows have neither the text field {self.text_field!r} nor {IDS_FIELD!r}; pass formatting_func")


def _is_hf_dataset(dataset: Any) -> bool:
    return hasattr(dataset, "column_names") and hasattr(dataset, "map")


def tokenize_dataset(dataset: Any, encode: EncodeRows, num_proc: Optional[int] = None) -> TokenizedRows:
    """Tokenize every row; a Hugging Face dataset goes through `map()` with the policy's worker count.

    `num_proc` is a request (None = auto, pass `dataset_num_proc.map_request(config)`), sized with this split's rows.
    """
    if isinstance(dataset, TokenizedRows):
        return dataset
    if _is_hf_dataset(dataset):
        return TokenizedRows(_map_main_first(dataset, encode, num_proc)[IDS_FIELD])
    rows = list(dataset)
    if rows and isinstance(rows[0], str):
        rows = [{encode.text_field: text} for text in rows]
    columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else {})}
    return TokenizedRows(encode(columns)[IDS_FIELD] if rows else [])


def _map_main_first(dataset: Any, encode: EncodeRows, request: Any) -> Any:
    """`map()` under `mlx.launch` as under torchrun: each host's main rank maps first with the host's CPUs, then
    its other ranks map, reading its cache files where the dataset has a cache (one loaded from disk)."""
    from .distributed import current_world

    columns = list(dataset.column_names)
    counts: List[Optional[int]] = []

    def sizer(turn: Optional[str]) -> Callable[..., Any]:
        def sized(*args: Any, **kwargs: Any) -> Any:
            counts.append(get_dataset_num_proc(*args, main_first=turn, **kwargs))
            return counts[-1]

        return sized

    def run_main() -> Tuple[Any, int]:
        mapped = sized_map(dataset, encode, request, sizer=sizer(MAIN_FIRST_MAIN), batched=True, remove_columns=columns)
        return mapped, (counts[-1] or 0) if counts else 0

    def run_rest(main_count: int) -> Any:
        # The main rank's worker count names its cache files; asking for the same one reads them instead of mapping.
        same = main_count >= 0 and bool(getattr(dataset, "cache_files", None))
        rest = (lambda *args, **kwargs: main_count or None) if same else sizer(MAIN_FIRST_REST)
        return sized_map(dataset, encode, request, sizer=rest, batched=True, remove_columns=columns)

    world = current_world()
    if not world.is_distributed or world.local_size <= 1:
        return sized_map(dataset, encode, request, batched=True, remove_columns=columns)
    return world.main_first(f"tokenizing {len(dataset)} rows", run_main, run_rest)


def epoch_batches(lengths: np.ndarray, batch_size: int, order: str, seed: int, epoch: int) -> List[np.ndarray]:
    """Row indices of each batch in one epoch; the order depends only on the seed and the epoch (for resumes)."""
    count = len(lengths)
    rng = np.random.default_rng((seed, epoch))
    if order == "sequential":
        indices = np.arange(count)
    elif order == "default":
        indices = rng.permutation(count)
    elif order == "length":
        indices = np.argsort(lengths, kind="stable")
    else:
        raise ValueError(f"unknown dataset order {order!r}")
    batches = [indices[start : start + batch_size] for start in range(0, count, batch_size)]
    if order == "length":
        # Similar lengths share a batch, but the batches themselves still come in a seeded random order.
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def pad_batch(
    rows: TokenizedRows, indices: Sequence[int], pad_id: int, multiple: Optional[int] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Rows padded to the longest, and each row's real length; `multiple` rounds up what the model sees (width - 1)."""
    lengths = rows.lengths[np.asarray(indices)]
    width = int(max(lengths.max(initial=1), 1))
    if multiple:
        width = 1 + -(-(width - 1) // multiple) * multiple
    tokens = np.full((len(indices), width), pad_id, dtype=np.int32)
    for slot, index in enumerate(indices):
        row = rows[int(index)]
        tokens[slot, : len(row)] = row
    return tokens, lengths.astype(np.int32)
