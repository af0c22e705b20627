# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`packing=True` on MLX: rows packed into sequences of `max_seq_length` by best-fit decreasing, as TRL's "bfd"
strategy packs them, and a loss that keeps every row to itself.

Each packed sequence runs with a block-diagonal causal mask, handed to mlx-lm's attention through per-layer
mask providers in the `cache` slot, so a token attends only to earlier tokens of its own row; no target crosses
from one row into the next. Positions are not restarted, but rotary embeddings make attention depend on position
differences only, which are the same inside each row: the loss equals the unpacked loss (float rounding aside).
A model with absolute position embeddings, or with recurrent or convolution layers that would carry one row's
state into the next, is refused by name.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .train_data import TrainRows

# Cache classes mlx-lm gives layers that keep state across tokens other than attention keys and values.
_STATEFUL_CACHES = ("ArraysCache", "MambaCache", "ConvCache")
# Module names of learned absolute position tables, whose positions packing would not restart.
_ABSOLUTE_POSITIONS = ("wpe", "embed_positions", "position_embeddings")


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> List[List[int]]:
    """Row indices grouped into bins of at most `capacity` tokens: longest row first, each into the fullest bin it
    fits (a new bin when none), as TRL's bfd packing does. Rows longer than `capacity` must be cut beforehand."""
    if capacity < 1:
        raise ValueError(f"max_seq_length must be positive to pack rows, got {capacity}")
    too_long = [index for index, length in enumerate(lengths) if int(length) > capacity]
    if too_long:
        raise ValueError(f"rows {too_long[:5]} are longer than max_seq_length={capacity}; cut them before packing")
    order = sorted(range(len(lengths)), key=lambda index: (-int(lengths[index]), index))
    bins: List[List[int]] = []
    free: List[int] = []
    for index in order:
        length = int(lengths[index])
        fitting = [slot for slot, room in enumerate(free) if room >= length]
        if fitting:
            slot = min(fitting, key=lambda candidate: (free[candidate], candidate))
            bins[slot].append(index)
            free[slot] -= length
        else:
            bins.append([index])
            free.append(capacity - length)
    return bins


def refuse_unpackable(model: Any, owner: str) -> None:
    """NotImplementedError when packed rows could see each other through the model's layers or positions."""
    stateful = []
    if hasattr(model, "make_cache"):
        stateful = sorted({type(cache).__name__ for cache in model.make_cache()} & set(_STATEFUL_CACHES))
    absolute = sorted({name.rsplit(".", 1)[-1] for name, _ in model.named_modules()} & set(_ABSOLUTE_POSITIONS))
    if stateful or absolute:
        reason = (
            f"its recurrent / convolution layers ({', '.join(stateful)}) would carry one row's state into the next"
            if stateful
            else f"its absolute position embeddings ({', '.join(absolute)}) would not restart in each row"
        )
        raise NotImplementedError(f"{owner}(packing=True) cannot pack rows for this model: {reason}; set packing=False")


class PackedTrainRows(TrainRows):
    """The trainer's rows as packed sequences; train_on_responses_only still masks the source rows."""

    def __init__(self, rows: TrainRows, capacity: int) -> None:
        self.source_rows = rows.source_rows
        self.source_lengths = rows.source_lengths
        self.masks: Optional[List[np.ndarray]] = rows.masks
        self.bins = best_fit_decreasing(self.source_lengths, capacity)
        self.packed_rows = [np.concatenate([self.source_rows[index] for index in members]) for members in self.bins]
        self.packed_lengths = np.array([len(row) for row in self.packed_rows], dtype=np.int64)
        self._read: List[int] = []
        self.present(np.arange(len(self.bins)))

    def present(self, order: "Sequence[int] | np.ndarray") -> None:
        """Show packed sequence `order[i]` at position `i`."""
        self.order = np.asarray(order, dtype=np.int64)
        self.rows = [self.packed_rows[index] for index in self.order]
        self.lengths = self.packed_lengths[self.order]
        self._read = []

    def __getitem__(self, index: int) -> np.ndarray:
        self._read.append(int(self.order[index]))
        return self.rows[index]

    def take_read_segments(self, width: int) -> Tuple[np.ndarray, np.ndarray]:
        """For the sequences read since the last call: each token's row number (1, 2, ...; 0 for padding) and
        whether it counts as a target (the response mask when set, else every real token), both (batch, width)."""
        read, self._read = self._read, []
        segments = np.zeros((len(read), width), dtype=np.int32)
        weights = np.zeros((len(read), width), dtype=np.float32)
        for slot, packed in enumerate(read):
            start = 0
            for number, index in enumerate(self.bins[packed], start=1):
                length = int(self.source_lengths[index])
                segments[slot, start : start + length] = number
                keep = self.masks[index][:length] if self.masks is not None else np.ones(length, dtype=bool)
                weights[slot, start : start + len(keep)] = keep
                start += length
        return segments, weights


class _BlockMask:
    """What mlx-lm's attention reads from a layer's cache: no stored keys, position offset 0, and our mask."""

    offset = 0

    def __init__(self, allowed: Any) -> None:
        self.allowed = allowed

    def update_and_fetch(self, keys: Any, values: Any) -> Tuple[Any, Any]:
        return keys, values

    def make_mask(self, length: int, return_array: bool = False, window_size: Optional[int] = None) -> Any:
        import mlx.core as mx

        allowed = self.allowed
        if window_size is not None:
            positions = mx.arange(allowed.shape[-1])
            allowed = allowed & ((positions[:, None] - positions[None, :]) < window_size)
        return allowed


def block_causal_mask(segments: Any) -> Any:
    """(length, length) booleans for one packed sequence: a token sees earlier tokens of its own row (padding sees
    padding, so no attention row is empty)."""
    import mlx.core as mx

    positions = mx.arange(segments.shape[0])
    return (segments[:, None] == segments[None, :]) & (positions[:, None] >= positions[None, :])


def packed_cross_entropy(model: Any, tokens: Any, segments: Any, weights: Any) -> Tuple[Any, Any]:
    """Mean next-token loss over targets inside their own row (and kept by `weights`), and their count.

    Each packed sequence runs alone, so its mask is two-dimensional and broadcasts over any attention layout (some
    families split heads into five dimensions); the output head runs a chunk of positions at a time, so the whole
    `[tokens x vocabulary]` logits never exist.
    """
    import mlx.core as mx

    from unsloth_zoo.mlx.chunked_loss import token_scores

    layers = len(model.layers)
    total, count = mx.array(0.0, dtype=mx.float32), mx.array(0.0, dtype=mx.float32)
    for row in range(tokens.shape[0]):
        inputs, targets, seen = tokens[row : row + 1, :-1], tokens[row : row + 1, 1:], segments[row, :-1]
        # The block mask rides in the cache slot to the body; the head then runs a chunk of positions at a time.
        masks = [_BlockMask(block_causal_mask(seen))] * layers
        log_probs = token_scores(model, inputs, targets, cache=masks).log_probs
        keep = ((segments[row, 1:] == seen) * (seen > 0) * weights[row, 1:])[None, :]
        total = total - (log_probs * keep).sum()
        count = count + keep.sum()
    return total / mx.maximum(count, 1), count


def packed_step(model: Any, rows: PackedTrainRows) -> Any:
    """The trainer's forward-backward over packed sequences (uncompiled: each batch's segments come from its rows)."""
    import mlx.core as mx
    import mlx.nn as nn

    loss_and_grad = nn.value_and_grad(model, packed_cross_entropy)

    def forward_backward(tokens: Any, lengths: Any) -> Any:
        segments, weights = rows.take_read_segments(tokens.shape[1])
        (loss, count), grads = loss_and_grad(model, tokens, mx.array(segments), mx.array(weights))
        return loss, count, grads

    return forward_backward
