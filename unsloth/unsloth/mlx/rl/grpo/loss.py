# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""GRPO's arithmetic, as TRL's `GRPOTrainer` does it: group-relative advantages, per-token log-probabilities of the
completions (a vision model's from its own forward, one row at a time), and the clipped policy loss aggregated by
`loss_type`, with the KL term against a reference.

The importance ratio compares the policy with the one that sampled: given the old log-probabilities (a generation
batch reused for `num_iterations` passes) or, on the first pass, the current ones detached (1 in value, carrying the
policy gradient). GSPO (`importance_sampling_level="sequence"`) takes one ratio per completion, from the mean
log-ratio over its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import mlx.core as mx
import numpy as np
from unsloth_zoo.mlx.chunked_loss import token_scores

from ...vision.backend import causal_logits

STD_FLOOR = 1e-4


def _nanstd(values: np.ndarray, axis: Optional[int] = None) -> np.ndarray:
    """TRL's `nanstd`: the sample (n - 1) standard deviation over the values that are not NaN."""
    count = np.sum(~np.isnan(values), axis=axis)
    mean = np.nanmean(values, axis=axis, keepdims=True)
    variance = np.nansum((values - mean) ** 2, axis=axis) / np.maximum(count - 1, 1)
    return np.sqrt(variance)


@dataclass
class GroupScores:
    advantages: np.ndarray
    rewards: np.ndarray
    metrics: Dict[str, float]


def group_advantages(
    rewards_per_func: np.ndarray,
    weights: Sequence[float],
    num_generations: int,
    scale_rewards: str,
    names: Sequence[str],
) -> GroupScores:
    """Advantages of each completion against its group's mean (scaled by the group's or batch's std), and the
    reward metrics TRL logs: `reward`, `reward_std`, `rewards/<name>/mean|std`, `frac_reward_zero_std`."""
    per_func = np.asarray(rewards_per_func, dtype=np.float32)
    unscorable = np.isnan(per_func).all(axis=1)
    rewards = np.nansum(per_func * np.asarray(weights, dtype=np.float32)[None, :], axis=1).astype(np.float32)
    rewards[unscorable] = np.nan
    grouped = rewards.reshape(-1, num_generations)
    means = np.repeat(np.nanmean(grouped, axis=1), num_generations)
    if scale_rewards == "batch":
        stds = np.full_like(rewards, _nanstd(rewards))
    else:
        stds = np.repeat(_nanstd(grouped, axis=1), num_generations).astype(np.float32)
    advantages = rewards - means
    if scale_rewards != "none":
        advantages = advantages / (stds + STD_FLOOR)
    advantages = np.nan_to_num(advantages, nan=0.0).astype(np.float32)
    metrics: Dict[str, float] = {}
    for index, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = float(np.nanmean(per_func[:, index]))
        metrics[f"rewards/{name}/std"] = float(_nanstd(per_func[:, index]))
    metrics["reward"] = float(np.nanmean(rewards))
    metrics["reward_std"] = float(_nanstd(rewards))
    metrics["frac_reward_zero_std"] = float(np.mean(np.isclose(stds, 0.0)))
    return GroupScores(advantages, rewards, metrics)


@dataclass
class CompletionBatch:
    """Prompt + completion rows, right-padded, with where each completion starts and which tokens count."""

    tokens: mx.array  # (rows, width)
    completion_starts: mx.array  # (rows,) index of each completion's first token
    completion_ids: mx.array  # (rows, completion width)
    mask: mx.array  # (rows, completion width), 1 for a real completion token
    advantages: mx.array  # (rows,)
    ref_logps: Optional[mx.array] = None
    old_logps: Optional[mx.array] = None  # the sampling policy's, when it is no longer the current one
    features: Optional[List[Dict[str, Any]]] = None  # each row's image features, for a vision model


def build_batch(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    advantages: Sequence[float],
    pad_id: int,
    old_logps: Optional[Sequence[Sequence[float]]] = None,
    features: Optional[List[Dict[str, Any]]] = None,
) -> CompletionBatch:
    width = max(len(completion) for completion in completion_ids) or 1
    total = max(len(prompt) + width for prompt in prompt_ids)
    tokens = np.full((len(prompt_ids), total), pad_id, dtype=np.int32)
    completions = np.full((len(prompt_ids), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(prompt_ids), width), dtype=np.float32)
    for row, (prompt, completion, kept) in enumerate(zip(prompt_ids, completion_ids, masks)):
        tokens[row, : len(prompt) + len(completion)] = [*prompt, *completion]
        completions[row, : len(completion)] = completion
        mask[row, : len(kept)] = kept
    starts = np.array([len(prompt) for prompt in prompt_ids], dtype=np.int32)
    batch = CompletionBatch(
        mx.array(tokens), mx.array(starts), mx.array(completions), mx.array(mask), mx.array(np.asarray(advantages))
    )
    if old_logps is not None:
        old = np.zeros((len(prompt_ids), width), dtype=np.float32)
        for row, values in enumerate(old_logps):
            old[row, : len(values)] = values
        batch.old_logps = mx.array(old)
    batch.features = features
    return batch


def vision_completion_logps(
    model: Any, batch: Any, temperature: float, with_entropy: bool, differentiable: bool
) -> Any:
    """Per-token log-probabilities (and entropies) of each row's completion, from the model's forward over the row's
    prompt, images and completion; logits divided by the temperature, as TRL does."""
    width = batch.completion_ids.shape[1]
    all_logps, all_entropy = [], []
    for row, found in enumerate(batch.features):
        extras = dict(found)
        pixels = extras.pop("pixel_values", None)
        logits = causal_logits(model, batch.tokens[row : row + 1], pixels, extras)[0].astype(mx.float32)
        start = batch.completion_starts[row]
        positions = mx.minimum(start - 1 + mx.arange(width), logits.shape[0] - 1)
        picked = logits[positions] / temperature
        log_probs = picked - mx.logsumexp(picked, axis=-1, keepdims=True)
        targets = batch.completion_ids[row]
        all_logps.append(mx.take_along_axis(log_probs, targets[:, None], axis=-1)[:, 0])
        if with_entropy:
            all_entropy.append(-(mx.exp(log_probs) * log_probs).sum(-1))
    logps = mx.stack(all_logps)
    if not differentiable:
        logps = mx.stop_gradient(logps)
    if not with_entropy:
        return logps
    return logps, mx.stop_gradient(mx.stack(all_entropy))


def completion_logps(
    model: Any, batch: CompletionBatch, temperature: float, with_entropy: bool = False, differentiable: bool = True
) -> Any:
    """Per-token log-probabilities of each completion token (logits divided by the temperature, as TRL does),
    and optionally the per-token entropies; the logits are taken a chunk of positions at a time."""
    if batch.features is not None:
        return vision_completion_logps(model, batch, temperature, with_entropy, differentiable)
    inputs = batch.tokens[:, :-1]
    width = batch.completion_ids.shape[1]
    positions = mx.minimum(batch.completion_starts[:, None] - 1 + mx.arange(width)[None, :], inputs.shape[1] - 1)
    scores = token_scores(
        model,
        inputs,
        batch.completion_ids,
        temperature=temperature,
        positions=positions,
        statistics=with_entropy,
        differentiable=differentiable,
    )
    return (scores.log_probs, scores.entropy) if with_entropy else scores.log_probs


@dataclass(frozen=True)
class LossSettings:
    loss_type: str
    beta: float
    epsilon_low: float
    epsilon_high: float
    temperature: float
    max_completion_length: int
    delta: Optional[float] = None
    importance_sampling_level: str = "token"
    bias_correction_kl: bool = False


def log_importance_weights(logps: mx.array, batch: CompletionBatch, level: str) -> mx.array:
    """TRL's log-ratio to the sampling policy: per token (rows, width), or per completion (rows, 1) as GSPO's mean
    over the completion's tokens."""
    old = mx.stop_gradient(logps) if batch.old_logps is None else batch.old_logps
    log_ratio = logps - old
    if level == "token":
        return log_ratio
    mask = batch.mask
    return ((log_ratio * mask).sum(-1) / mx.maximum(mask.sum(-1), 1.0))[:, None]


def policy_loss(model: Any, batch: CompletionBatch, settings: LossSettings, normalizer: mx.array) -> tuple:
    """The micro-batch's loss (already divided for accumulation) and its unreduced pieces for the metrics.

    `normalizer`: the accumulation steps for grpo / bnpo / dr_grpo, the generation batch's token count for dapo.
    """
    logps, entropy = completion_logps(model, batch, settings.temperature, with_entropy=True)
    mask = batch.mask
    advantages = batch.advantages[:, None]
    coef_1 = mx.exp(log_importance_weights(logps, batch, settings.importance_sampling_level))
    coef_2 = mx.clip(coef_1, 1 - settings.epsilon_low, 1 + settings.epsilon_high)
    if settings.delta is not None:
        coef_1 = mx.minimum(coef_1, settings.delta)
    per_token = -mx.minimum(coef_1 * advantages, coef_2 * advantages)
    kl = None
    if settings.beta != 0.0:
        difference = batch.ref_logps - logps
        kl = mx.exp(difference) - difference - 1
        if settings.bias_correction_kl:
            kl = kl * coef_1
        per_token = per_token + settings.beta * kl
    masked = per_token * mask
    if settings.loss_type == "grpo":
        loss = (masked.sum(-1) / mx.maximum(mask.sum(-1), 1.0)).mean() / normalizer
    elif settings.loss_type == "bnpo":
        loss = masked.sum() / mx.maximum(mask.sum(), 1.0) / normalizer
    elif settings.loss_type == "dr_grpo":
        loss = masked.sum() / (mask.shape[0] * settings.max_completion_length) / normalizer
    else:
        loss = masked.sum() / mx.maximum(normalizer, 1.0)
    pieces = {"coef_1": mx.stop_gradient(coef_1), "entropy": mx.stop_gradient(entropy)}
    if kl is not None:
        pieces["kl"] = mx.stop_gradient(kl)
    return loss, pieces


def loss_metrics(pieces: Dict[str, mx.array], batch: CompletionBatch, settings: LossSettings) -> Dict[str, float]:
    """TRL's per-micro-batch metrics: `kl`, `entropy` and the clip ratios, as token means over the mask (a ratio per
    completion, GSPO's, counts each completion once)."""
    mask = batch.mask
    count = mx.maximum(mask.sum(), 1.0)
    advantages = batch.advantages[:, None]

    per_sequence = settings.importance_sampling_level == "sequence"

    def masked_mean(values: mx.array, each_sequence: bool = False) -> float:
        if each_sequence:
            return float(values.mean().item())
        return float(((values * mask).sum() / count).item())

    def per_row(values: mx.array) -> mx.array:
        if per_sequence:
            return values[:, 0]
        return (values * mask).sum(-1) / mask.sum(-1)

    coef_1 = pieces["coef_1"]
    low = ((coef_1 < 1 - settings.epsilon_low) & (advantages < 0)).astype(mx.float32)
    high = ((coef_1 > 1 + settings.epsilon_high) & (advantages > 0)).astype(mx.float32)
    metrics = {}
    if "kl" in pieces:
        metrics["kl"] = masked_mean(pieces["kl"])
    metrics["entropy"] = masked_mean(pieces["entropy"])
    metrics["clip_ratio/low_mean"] = masked_mean(low, per_sequence)
    metrics["clip_ratio/high_mean"] = masked_mean(high, per_sequence)
    metrics["clip_ratio/region_mean"] = masked_mean(mx.maximum(low, high), per_sequence)
    metrics["clip_ratio/low_min"] = float(np.nanmin(np.array(per_row(low))))
    metrics["clip_ratio/high_max"] = float(np.nanmax(np.array(per_row(high))))
    return metrics


def completion_metrics(lengths: List[int], terminated: List[bool]) -> Dict[str, float]:
    """TRL's `completions/*` lengths over the generation batch; terminated ones ended with an end-of-sequence."""
    values = np.asarray(lengths, dtype=np.float64)
    ended = values[np.asarray(terminated, dtype=bool)] if any(terminated) else np.zeros(1)
    return {
        "completions/mean_length": float(values.mean()),
        "completions/min_length": float(values.min()),
        "completions/max_length": float(values.max()),
        "completions/clipped_ratio": float(1 - np.mean(terminated)),
        "completions/mean_terminated_length": float(ended.mean()),
        "completions/min_terminated_length": float(ended.min()),
        "completions/max_terminated_length": float(ended.max()),
    }
