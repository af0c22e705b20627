# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The vision collator's rows, registered with the trainer (`training.own_rows`), which sits below this layer, when
the `vision` package is first imported."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from unsloth_zoo.mlx.data import TokenizedRows

from ..training.collated import collate_rows, collator_inputs, own_collator
from ..training.own_rows import register_own_rows
from ..training.train_data import PreparedRows, TrainRows
from .backend import vision_tower
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


class CollatedVisionRows(VisionOwnRows):
    """A notebook's own collator (`collate_fn` calling the processor) on a vision model: each row collated once,
    its tokens, -100 labels and image or audio features trained as the vision collator's rows are."""

    def collator(self, model: Any, processor: Any, data_collator: Any, dataset: Any) -> Optional[Any]:
        if vision_collator(data_collator) is None and own_collator(data_collator) and vision_tower(model) is not None:
            return data_collator
        return None

    def encode(self, collator: Any, dataset: Any, eval_dataset: Any, config: Any) -> Tuple[PreparedRows, VisionRows]:
        refuse_vision_eval(eval_dataset)
        rows = collate_rows(collator, collator_inputs(dataset, config, raw=True))
        # As the vision collator drops it: mlx-vlm's forward pass reads no token types.
        features = [{name: value for name, value in row.features.items() if name != "token_type_ids"} for row in rows]
        vision = VisionRows(TokenizedRows([row.ids for row in rows]), [row.mask for row in rows], features)
        return PreparedRows(vision.rows, False, vision.masks), vision


register_own_rows(VisionOwnRows())
register_own_rows(CollatedVisionRows())
