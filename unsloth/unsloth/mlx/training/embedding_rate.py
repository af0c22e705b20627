# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`embedding_learning_rate`: trained embeddings (`embed_tokens`, `lm_head`) learn at their own rate, as in CUDA
Unsloth's trainer, which gives them a parameter group of their own; everything else keeps `learning_rate`.

They are trained when `get_peft_model`'s `target_modules` names them. The embedding rate follows the same schedule
(warmup, decay) as the main one. When no embedding is trained (LoRA on the linears only) the rate has nothing to
act on, which is said once.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.optimizers as optimizers
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.optim import build_optimizer, build_schedule

logger = logging.getLogger(__name__)
EMBEDDING_NAMES = ("embed_tokens", "lm_head")
_noted_unused = False


def is_embedding(path: str, weight: Any = None) -> bool:
    return any(part in EMBEDDING_NAMES for part in path.split("."))


class _TwoRates(optimizers.MultiOptimizer):
    """Embeddings on the first optimizer, the rest on the second; `step` and `learning_rate` are the main one's."""

    @property
    def step(self) -> Any:
        return self.optimizers[-1].step

    @property
    def learning_rate(self) -> Any:
        return self.optimizers[-1].learning_rate


def with_embedding_learning_rate(trainer: Any, rate: float) -> Any:
    """The trainer's optimizer, split so trained embeddings use `rate` on the same schedule."""
    global _noted_unused
    trained = [path for path, _ in tree_flatten(trainer.model.trainable_parameters()) if is_embedding(path)]
    if not trained:
        if not _noted_unused:
            _noted_unused = True
            logger.warning(
                "embedding_learning_rate=%s has no effect: no embedding is being trained "
                "(name embed_tokens / lm_head in get_peft_model's target_modules to train them)",
                rate,
            )
        return trainer.optimizer
    args = trainer.args
    main_rate = args.learning_rate
    scaled = [value * rate / main_rate if main_rate else rate for value in trainer._rates]
    embedding_optimizer = build_optimizer(
        args.optim,
        build_schedule(scaled),
        weight_decay=args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )
    split = _TwoRates([embedding_optimizer, trainer.optimizer], [is_embedding])
    split.init(trainer.model.trainable_parameters())
    return split
