# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Evaluating a step's gradients in the order the backward pass makes them, so each block's recomputed
activations are freed before the next block's are made.

One `mx.eval` over every gradient schedules the backward graph depth first from the first gradient in the tree,
the first block's, whose chain runs through every later block while their own gradients wait on what that chain
recomputed. Measured on a 12-layer llama with checkpointing (hidden 128, 512 tokens), training added 22.4 MiB that
way and 13.5 MiB with each gradient evaluated on its own, the last in the tree first.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten


def evaluate_gradients(grads: Any, *others: Any) -> None:
    """Evaluate `others` (the loss, its counts), then each gradient leaf of `grads`, the last in the tree first."""
    mx.eval(*others)
    for _, gradient in reversed(tree_flatten(grads)):
        mx.eval(gradient)
