# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The public trainer's view of its tokenized training rows: a per-epoch order, and optional per-token loss masks.

The backend batches rows `0..n-1` in sequence and pads each batch by reading rows one at a time; this view decides
which source row sits at each position, and remembers which source rows the last batch read so their masks follow.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from unsloth_zoo.mlx.data import TokenizedRows


class TrainRows(TokenizedRows):
    def __init__(self, source: TokenizedRows) -> None:
        self.source_rows = list(source.rows)
        self.source_lengths = np.asarray(source.lengths)
        self.masks: Optional[List[np.ndarray]] = None
        self._read: List[int] = []
        self.present(np.arange(len(self.source_rows)))

    def present(self, order: Sequence[int]) -> None:
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
