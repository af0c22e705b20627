# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Next-token cross-entropy over the real tokens of a padded batch."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import mlx.core as mx

from .chunked_loss import token_scores


def masked_cross_entropy(
    model: Any, tokens: mx.array, lengths: mx.array, weights: Optional[mx.array] = None, differentiable: bool = True
) -> Tuple[mx.array, mx.array]:
    """Mean loss over predicted positions inside each row's length (and kept by `weights`, one per token when
    given), and how many positions that was; the logits are taken a chunk of positions at a time."""
    targets = tokens[:, 1:]
    positions = mx.arange(targets.shape[1])[None, :]
    mask = positions < (lengths[:, None] - 1)
    if weights is not None:
        # The target at position t is token t + 1, so it is kept when token t + 1 is.
        mask = mask * weights[:, 1:]
    per_token = -token_scores(model, tokens[:, :-1], targets, differentiable=differentiable).log_probs * mask
    count = mask.sum()
    return per_token.sum() / mx.maximum(count, 1), count
