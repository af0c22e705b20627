# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`DPOTrainer` on MLX: TRL's sigmoid DPO loss against the reference policy, with TRL 1.x's logged metrics."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import mlx.core as mx

from unsloth_zoo.mlx.chunked_loss import TokenScores, token_scores

from .dpo_config import DPOConfig
from .preference_data import PreferencePair, dpo_pair
from .preference_trainer import PairBatch, PreferenceTrainer, Sequence
from .reference import ReferencePolicy


def completion_scores(
    model: Any, batch: PairBatch, statistics: bool = False, differentiable: bool = True
) -> TokenScores:
    """The scores of each sequence's completion targets (`batch.answer_positions`): every DPO value is masked to
    them, so the output head never runs over a prompt position."""
    targets = mx.take_along_axis(batch.tokens[:, 1:], batch.answer_positions, axis=1)
    return token_scores(
        model,
        batch.tokens[:, :-1],
        targets,
        positions=batch.answer_positions,
        statistics=statistics,
        differentiable=differentiable,
    )


def sequence_log_probs(model: Any, batch: PairBatch) -> mx.array:
    """Each sequence's summed log-probability of its completion tokens."""
    per_token = completion_scores(model, batch, differentiable=False).log_probs
    return (per_token * batch.answer_mask).sum(axis=-1)


def _masked_mean(values: mx.array, mask: mx.array) -> mx.array:
    return (values * mask).sum() / mx.maximum(mask.sum(), 1)


class DPOTrainer(PreferenceTrainer):
    """TRL's `DPOTrainer(model, ref_model, args, train_dataset, tokenizer / processing_class, ...)` on MLX."""

    config_class = DPOConfig
    # Every DPO value is masked to the completion tokens, so padding the width for compilation changes none.
    compiles_step = True

    def __init__(self, model: Any, *args: Any, ref_model: Any = None, **kwargs: Any) -> None:
        super().__init__(model, *args, ref_model=ref_model, **kwargs)
        self.reference = None if self.args.reference_free else ReferencePolicy(model, ref_model)

    def pair(self, tokenizer: Any, row: dict, config: Any) -> PreferencePair:
        return dpo_pair(tokenizer, row)

    def keeps(self, pair: PreferencePair, config: Any) -> bool:
        # As TRL: a prompt that alone fills max_length would leave no completion token to learn from.
        return len(self._cut(pair, config).prompt_ids) < config.max_seq_length

    @staticmethod
    def _cut(pair: PreferencePair, config: Any) -> PreferencePair:
        """TRL 0.2x's max_prompt_length (the prompt's end is kept) and max_completion_length, when given."""
        prompt, chosen, rejected = pair
        if config.max_prompt_length is not None:
            prompt = prompt[-config.max_prompt_length :]
        if config.max_completion_length is not None:
            chosen, rejected = chosen[: config.max_completion_length], rejected[: config.max_completion_length]
        return PreferencePair(prompt, chosen, rejected)

    def sequences(self, pair: PreferencePair, config: Any) -> Tuple[Sequence, Sequence]:
        prompt, chosen, rejected = self._cut(pair, config)
        limit = config.max_seq_length
        return ([*prompt, *chosen][:limit], len(prompt)), ([*prompt, *rejected][:limit], len(prompt))

    def reference_values(self, batch: PairBatch) -> Any:
        if self.reference is None:
            return mx.zeros((2 * batch.pairs,))
        return self.reference.values(lambda model: sequence_log_probs(model, batch))

    def loss_and_metrics(self, model: Any, batch: PairBatch, reference: Any) -> Tuple[mx.array, Dict[str, mx.array]]:
        scores = completion_scores(model, batch, statistics=True)
        logps = (scores.log_probs * batch.answer_mask).sum(axis=-1)
        pairs = batch.pairs
        chosen_ratio = logps[:pairs] - reference[:pairs]
        rejected_ratio = logps[pairs:] - reference[pairs:]
        beta = float(self.args.beta)
        # -log(sigmoid(x)) written as softplus(-x), stable for large |x|.
        loss = mx.logaddexp(0.0, -beta * (chosen_ratio - rejected_ratio)).mean()
        return loss, self._metrics(scores, logps, chosen_ratio, rejected_ratio, batch)

    def _metrics(self, scores: Any, logps: Any, chosen_ratio: Any, rejected_ratio: Any, batch: PairBatch) -> Dict:
        pairs, mask = batch.pairs, batch.answer_mask
        entropy, mean_logits, correct = scores.entropy, scores.mean_logit, scores.argmax_hit
        chosen_rewards = mx.stop_gradient(self.args.beta * chosen_ratio)
        rejected_rewards = mx.stop_gradient(self.args.beta * rejected_ratio)
        logps = mx.stop_gradient(logps)
        return {
            "entropy": _masked_mean(entropy, mask),
            "logits/chosen": _masked_mean(mean_logits[:pairs], mask[:pairs]),
            "logits/rejected": _masked_mean(mean_logits[pairs:], mask[pairs:]),
            "mean_token_accuracy": _masked_mean(correct[:pairs], mask[:pairs]),
            "rewards/chosen": chosen_rewards.mean(),
            "rewards/rejected": rejected_rewards.mean(),
            "rewards/accuracies": (chosen_rewards > rejected_rewards).astype(mx.float32).mean(),
            "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
            "logps/chosen": logps[:pairs].mean(),
            "logps/rejected": logps[pairs:].mean(),
        }

    def eval_extras(self) -> Dict[str, float]:
        # TRL's eval logs carry the training token count as it stands.
        return {"num_tokens": float(self._total_tokens)}

    def _store(self, metrics: Dict[str, mx.array], batch: PairBatch) -> None:
        super()._store(metrics, batch)
        # TRL logs the tokens trained on so far (its running count), not a per-step mean.
        self._total_tokens += int(batch.targets.sum().item()) + 2 * batch.pairs
        self._stored["num_tokens"] = [float(self._total_tokens)]
