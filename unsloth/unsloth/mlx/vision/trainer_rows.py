# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The vision collator's rows, registered with the trainer (`training.own_rows`), which sits below this layer, when
the `vision` package is first imported."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from ..training.own_rows import register_own_rows
from ..training.train_data import PreparedRows, TrainRows
from .training import (
    VisionRows,
    VisionTrainRows,
    encode_vision_rows,
    implied_collator,
    refuse_vision_eval,
    vision_collator,
    vision_step,
)


class VisionOwnRows:
    """UnslothVisionDataCollator's rows: images encoded by the processor, trained by mlx-vlm's forward pass."""

    def collator(self, model: Any, processor: Any, data_collator: Any, dataset: Any) -> Optional[Any]:
        return vision_collator(data_collator) or implied_collator(model, processor, data_collator, dataset)

    def encode(self, collator: Any, dataset: Any, eval_dataset: Any, config: Any) -> Tuple[PreparedRows, VisionRows]:
        refuse_vision_eval(eval_dataset)
        vision = encode_vision_rows(collator, dataset, config)
        return PreparedRows(vision.rows, False, vision.masks), vision

    def train_rows(self, rows: Any, encoded: VisionRows) -> TrainRows:
        return VisionTrainRows(rows, encoded.masks, encoded.features)

    def step(self, model: Any, rows: Any) -> Callable[..., Any]:
        return vision_step(model, rows)


register_own_rows(VisionOwnRows())
