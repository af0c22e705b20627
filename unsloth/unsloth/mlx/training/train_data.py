# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The training rows as the MLX trainer holds them: read from what notebooks pass, ordered, masked and shown back.

A streamed `IterableDataset` is read for as many rows as `max_steps` needs (again from the start when it runs
out, as Hugging Face's trainer does); rows with an `input_ids` column (or with `skip_prepare_dataset`) are used
as they are and a `labels` column masked with -100 becomes the loss mask; image rows that no vision collator
reads are refused by name. Each epoch the rows are shown to the backend in
CUDA Unsloth's order (drawn as torch draws it, without torch), and `trainer.train_dataset` shows TRL's prepared
columns (`input_ids`, `attention_mask`, and `labels` once masked).
"""

from __future__ import annotations

import importlib.util
import itertools
import uuid
from typing import Any, List, NamedTuple, Optional, Sequence

import numpy as np

from unsloth_zoo.mlx.data import TokenizedRows

from .arguments import TORCH_ORDER


PADDING_COLLATORS = frozenset(
    {"DataCollatorForSeq2Seq", "DataCollatorWithPadding", "DefaultDataCollator", "DataCollatorForLanguageModeling"}
)
_COLLATOR_PACKAGES = frozenset({"transformers", "trl"})


def describe(collator: Any) -> str:
    """The collator's class, or the function itself when a plain function is passed as the collator."""
    named = collator if callable(collator) and hasattr(collator, "__qualname__") else type(collator)
    return f"{named.__module__}.{named.__qualname__}"


def only_pads(collator: Any) -> bool:
    """True for the library's own padding collators; a subclass or a masking/flattening variant may do more."""
    kind = type(collator)
    if kind.__name__ not in PADDING_COLLATORS or kind.__module__.split(".")[0] not in _COLLATOR_PACKAGES:
        return False
    # transformers' language-modeling collator masks tokens unless mlm=False; TRL's may drop padding altogether.
    return not getattr(collator, "mlm", False) and not getattr(collator, "padding_free", False)


IGNORE_INDEX = -100
IMAGE_COLUMNS = ("images", "image")


class PreparedRows(NamedTuple):
    rows: Any
    streamed: bool
    masks: Optional[List[np.ndarray]]


def is_streamed(dataset: Any) -> bool:
    """A `datasets.IterableDataset` (or any iterable without a length): rows can only be read in order."""
    return dataset is not None and hasattr(dataset, "__iter__") and not hasattr(dataset, "__len__")


def columns(dataset: Any) -> List[str]:
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return list(names)
    if isinstance(dataset, (list, tuple)) and dataset and isinstance(dataset[0], dict):
        return list(dataset[0])
    # A map-style torch `Dataset` (Llasa's `MemmapTTSDataset`): its rows' keys are its columns.
    if _map_style(dataset) and len(dataset) and isinstance(dataset[0], dict):
        return list(dataset[0])
    features = getattr(dataset, "features", None)
    return list(features) if features else []


def refuse_images(*datasets: Any) -> None:
    for dataset in datasets:
        found = [name for name in IMAGE_COLUMNS if name in columns(dataset)]
        if found:
            raise NotImplementedError(
                f"this dataset has an {found[0]!r} column, and the trainer was given no UnslothVisionDataCollator: "
                "for vision fine-tuning load the model with FastVisionModel and pass "
                "data_collator=UnslothVisionDataCollator(model, processor); for text, drop the images"
            )


def streamed_rows(dataset: Any, config: Any) -> List[Any]:
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


def _map_style(dataset: Any) -> bool:
    return hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not hasattr(dataset, "column_names")


def _column(rows: Any, name: str) -> List[Any]:
    if hasattr(rows, "column_names"):
        return list(rows[name])
    return [rows[index][name] for index in range(len(rows))]


def _trailing_padding(attention: np.ndarray, mask: np.ndarray) -> int:
    """How many positions at the row's end are padding (attention 0) outside the loss: nothing earlier sees them."""
    kept = np.flatnonzero((attention != 0) | mask)
    return len(attention) - (int(kept[-1]) + 1 if len(kept) else 0)


def _tokenized(rows: Any, max_seq_length: int) -> PreparedRows:
    if "input_ids" not in columns(rows):
        raise ValueError(
            "dataset_kwargs={'skip_prepare_dataset': True} needs an already tokenized dataset with an input_ids "
            f"column; this one has {columns(rows)} (drop skip_prepare_dataset to let the trainer tokenize the text)"
        )
    names = columns(rows)
    ids = [np.asarray(row).tolist()[:max_seq_length] for row in _column(rows, "input_ids")]
    masks = None
    if "labels" in names:
        masks = [np.asarray(row)[:max_seq_length] != IGNORE_INDEX for row in _column(rows, "labels")]
    if masks is not None and "attention_mask" in names:
        # Rows padded to a fixed length (as the TTS notebooks' datasets are) train on their tokens alone.
        attention = [np.asarray(row)[:max_seq_length] for row in _column(rows, "attention_mask")]
        cut = [len(row) - _trailing_padding(seen, mask) for row, seen, mask in zip(ids, attention, masks)]
        ids, masks = [row[:end] for row, end in zip(ids, cut)], [mask[:end] for mask, end in zip(masks, cut)]
    return PreparedRows(TokenizedRows(ids), False, masks)


def prepared_rows(dataset: Any, config: Any, skip_prepare_dataset: bool) -> PreparedRows:
    """The rows the backend tokenizes (or, with skip_prepare_dataset, already tokenized rows and their masks)."""
    if dataset is None:
        return PreparedRows(None, False, None)
    streamed = is_streamed(dataset)
    rows = streamed_rows(dataset, config) if streamed else dataset
    # Rows that bring their input_ids are trained on them, as TRL and CUDA Unsloth do: the text is not re-tokenized.
    if skip_prepare_dataset or "input_ids" in columns(rows):
        return _tokenized(rows, int(config.max_seq_length))._replace(streamed=streamed)
    return PreparedRows(rows, streamed, None)


# ---- the rows the backend batches ----


class TrainRows(TokenizedRows):
    def __init__(self, source: TokenizedRows) -> None:
        self.source_rows = list(source.rows)
        self.source_lengths = np.asarray(source.lengths)
        self.masks: Optional[List[np.ndarray]] = None
        self._read: List[int] = []
        self.present(np.arange(len(self.source_rows)))

    def present(self, order: "Sequence[int] | np.ndarray") -> None:
        """Show source row `order[i]` at position `i` (the backend's `rows` and `lengths` follow)."""
        self.order = np.asarray(order, dtype=np.int64)
        self.rows = [self.source_rows[index] for index in self.order]
        self.lengths = self.source_lengths[self.order]
        self._read = []

    def __getitem__(self, index: int) -> np.ndarray:
        if self.masks is not None:
            self._read.append(int(self.order[index]))
        return self.rows[index]

    def set_masks(self, masks: Sequence[np.ndarray]) -> None:
        """One boolean array per source row: True where that token counts as a training target."""
        if len(masks) != len(self.source_rows):
            raise ValueError(f"got {len(masks)} masks for {len(self.source_rows)} rows")
        self.masks = [np.asarray(mask, dtype=bool) for mask in masks]
        self._read = []

    def take_read_masks(self, width: int) -> np.ndarray:
        """The masks of the rows read since the last call, padded with False to `width`, as float32 (batch, width)."""
        read, self._read = self._read, []
        batch = np.zeros((len(read), width), dtype=np.float32)
        masks = self.masks or []  # rows are recorded as read only while masks are set
        for slot, index in enumerate(read):
            mask = masks[index][:width]
            batch[slot, : len(mask)] = mask
        return batch


def prepared_dataset(rows: Sequence[Any], masks: Optional[Sequence[np.ndarray]] = None) -> Any:
    """TRL's prepared columns for tokenized rows: `input_ids`, `attention_mask`, and with masks `labels`, which are
    -100 at every position the loss ignores (the first token is never a target, as in Hugging Face's shift).

    Built as Arrow list columns straight from the token arrays, so no Python list per token is made.
    """
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    arrays = [np.asarray(row, dtype=np.int64) for row in rows]
    offsets = pa.array(np.concatenate([[0], np.cumsum([len(row) for row in arrays])]).astype(np.int32))
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    columns = {
        "input_ids": pa.ListArray.from_arrays(offsets, pa.array(tokens)),
        "attention_mask": pa.ListArray.from_arrays(offsets, pa.array(np.ones(len(tokens), dtype=np.int64))),
    }
    if masks is not None:
        kept = np.concatenate([np.asarray(mask[: len(row)], dtype=bool) for row, mask in zip(arrays, masks)])
        kept[offsets.to_numpy()[:-1][[len(row) > 0 for row in arrays]]] = False
        columns["labels"] = pa.ListArray.from_arrays(offsets, pa.array(np.where(kept, tokens, IGNORE_INDEX)))
    # A fresh fingerprint, as datasets gives an unhashable transform's output; hashing every token would be slow.
    return datasets.Dataset(InMemoryTable(pa.table(columns)), fingerprint=uuid.uuid4().hex)


# ---- CUDA Unsloth's order ----


def torch_installed() -> bool:
    """Whether torch is installed (the preference trainers ask; the batch order no longer needs it)."""
    return importlib.util.find_spec("torch") is not None


# torch draws a 64-bit number per swap from this many rows on; below it, one 32-bit output of its Mersenne Twister.
_TORCH_RANDPERM_32BIT_ROWS = (2**32 - 1) // 20


def cuda_epoch_order(rows: int, seed: int, epoch: int) -> List[int]:
    """Row indices in the order CUDA Unsloth's trainer reads them in epoch `epoch`: `torch.randperm(rows)` from a
    generator seeded with `seed + epoch`, drawn without torch.

    torch's CPU randperm swaps position i with i + (draw % (rows - i)), each draw one 32-bit output of a Mersenne
    Twister seeded with the low 32 bits of the seed; numpy's legacy `RandomState` is that generator seeded the same
    way, and its stream is frozen by numpy's compatibility policy.
    """
    count = int(rows)
    if count >= _TORCH_RANDPERM_32BIT_ROWS:
        raise ValueError(
            f"{count} rows: CUDA Unsloth's order is drawn here for fewer than {_TORCH_RANDPERM_32BIT_ROWS}"
        )
    generator = np.random.RandomState((int(seed) + int(epoch)) & 0xFFFFFFFF)
    draws = generator.randint(0, 2**32, size=max(count - 1, 0), dtype=np.uint64).tolist()
    order = list(range(count))
    for index, draw in enumerate(draws):
        other = index + draw % (count - index)
        order[index], order[other] = order[other], order[index]
    return order


def settle_order(config: Any, streamed: bool) -> bool:
    """Set `config.dataset_order` to the order the rows will be read in; True when that is CUDA Unsloth's.

    Left unset, it is CUDA Unsloth's order ("torch_randperm"); a stream, or `streaming=True`, is read in the order
    it comes ("sequential"), as the Hugging Face trainer reads a stream.
    """
    if not getattr(config, "dataset_order_explicit", False):
        config.dataset_order = "sequential" if streamed or getattr(config, "streaming", False) else TORCH_ORDER
    return config.dataset_order == TORCH_ORDER
