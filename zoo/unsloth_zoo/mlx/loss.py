# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Next-token cross-entropy over the real tokens of a padded batch."""

from __future__ import annotations

from typing import Any, Tuple

import mlx.core as mx
import mlx.nn as nn


def masked_cross_entropy(model: Any, tokens: mx.array, lengths: mx.array) -> Tuple[mx.array, mx.array]:
    """Mean loss over predicted positions inside each row's length, and how many positions that was."""
    inputs = tokens[:, :-1]
    targets = tokens[:, 1:]
    logits = model(inputs)
    positions = mx.arange(targets.shape[1])[None, :]
    mask = positions < (lengths[:, None] - 1)
    per_token = nn.losses.cross_entropy(logits, targets) * mask
    count = mask.sum()
    return per_token.astype(mx.float32).sum() / mx.maximum(count, 1), count
