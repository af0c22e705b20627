# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`ORPOTrainer` on MLX: the chosen rows' NLL minus beta times the log-sigmoid of the log odds ratio, as TRL's."""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import mlx.core as mx

from .orpo_config import ORPOConfig
from .preference_data import PreferencePair, orpo_pair
from .preference_trainer import PairBatch, PreferenceTrainer, token_log_probs

_LOG_HALF = -math.log(2.0)


def log1mexp(values: mx.array) -> mx.array:
    """log(1 - exp(x)) for x < 0, each branch where it keeps its precision."""
    return mx.where(values < _LOG_HALF, mx.log1p(-mx.exp(values)), mx.log(-mx.expm1(values)))


def log_sigmoid(values: mx.array) -> mx.array:
    return -mx.logaddexp(0.0, -values)


class ORPOTrainer(PreferenceTrainer):
    """TRL's `ORPOTrainer(model, args, train_dataset, tokenizer / processing_class, ...)` on MLX."""

    config_class = ORPOConfig

    def pair(self, tokenizer: Any, row: dict, config: Any) -> PreferencePair:
        return orpo_pair(tokenizer, row, config.max_seq_length, config.max_prompt_length)

    def loss_and_metrics(self, model: Any, batch: PairBatch, reference: Any) -> Tuple[mx.array, Dict[str, mx.array]]:
        # TRL averages logits over padding too, computed with its attention mask; the mask makes ours the same.
        scores = token_log_probs(model, batch.tokens, batch.real, statistics=True)
        per_token = scores.log_probs
        pairs = batch.pairs
        # TRL's NLL covers the chosen rows' every real token, prompt included.
        nll = -(per_token[:pairs] * batch.targets[:pairs]).sum() / mx.maximum(batch.targets[:pairs].sum(), 1)
        mean_logps = (per_token * batch.completion).sum(axis=-1) / mx.maximum(batch.completion.sum(axis=-1), 1)
        chosen, rejected = mean_logps[:pairs], mean_logps[pairs:]
        log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))
        ratio = log_sigmoid(log_odds)
        beta = float(self.args.beta)
        loss = nll - (beta * ratio).mean()
        chosen_rewards, rejected_rewards = mx.stop_gradient(beta * chosen), mx.stop_gradient(beta * rejected)
        mean_logits = scores.mean_logit
        assert mean_logits is not None  # asked for with statistics=True
        metrics = {
            "rewards/chosen": chosen_rewards.mean(),
            "rewards/rejected": rejected_rewards.mean(),
            "rewards/accuracies": (chosen_rewards > rejected_rewards).astype(mx.float32).mean(),
            "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
            "logps/rejected": mx.stop_gradient(rejected).mean(),
            "logps/chosen": mx.stop_gradient(chosen).mean(),
            # As TRL: the plain mean over every position of the padded batch and the whole vocabulary.
            "logits/rejected": mean_logits[pairs:].mean(),
            "logits/chosen": mean_logits[:pairs].mean(),
            "nll_loss": mx.stop_gradient(nll),
            "log_odds_ratio": mx.stop_gradient(ratio).mean(),
            "log_odds_chosen": mx.stop_gradient(log_odds).mean(),
        }
        return loss, metrics
