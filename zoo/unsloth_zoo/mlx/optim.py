# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Optimizers, learning-rate schedules and gradient clipping for the MLX trainer.

Schedules follow Hugging Face's `get_scheduler` curves step for step; `mlx` is imported inside the functions
that need it so the config can validate names without loading it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Tuple

SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup")
CLIP_MODES = ("global_norm", "per_tensor_norm", "value", "none")
OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor", "lion")
# torch's clip_grad_norm_ adds this to the norm before dividing; kept so clipped values match it.
_NORM_EPSILON = 1e-6


def canonical_optimizer_name(name: str) -> str:
    """Our optimizer for a name, accepting Hugging Face's variants (`adamw_8bit`, `paged_adamw_32bit`, `lion_8bit`)."""
    text = str(getattr(name, "value", name)).lower()
    for prefix in ("paged_", ""):
        if not text.startswith(prefix):
            continue
        rest = text[len(prefix) :]
        if rest.startswith("adamw"):
            return "adamw"
        if rest.startswith("lion"):
            return "lion"
    if text in OPTIMIZERS:
        return text
    raise ValueError(
        f"optim must be one of {', '.join(OPTIMIZERS)} (or a Hugging Face adamw/lion variant), got {name!r}"
    )


def resolve_warmup_steps(warmup_steps: float, warmup_ratio: float, total_steps: int) -> int:
    """Whole warmup steps: a count of 1 or more wins, a value in (0, 1) or the ratio is a share of the real total."""
    if warmup_steps >= 1:
        return int(warmup_steps)
    share = warmup_steps if warmup_steps > 0 else warmup_ratio
    return math.ceil(total_steps * share) if share > 0 else 0


def schedule_factor(kind: str, step: int, warmup: int, total: int) -> float:
    """The multiplier of the peak learning rate for the update that follows `step` earlier updates."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}")
    if kind == "constant":
        return 1.0
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    if kind == "linear":
        # Written as Hugging Face writes it, so the logged rate is the same float, not one rounding away.
        return max(0.0, (total - step) / max(1, total - warmup))
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def learning_rates(kind: str, peak: float, warmup: int, total: int) -> List[float]:
    """The learning rate of every update, 0 through `total` (the last entry repeats past the end)."""
    return [peak * schedule_factor(kind, step, warmup, total) for step in range(total + 1)]


def build_schedule(rates: List[float]) -> Callable[[Any], Any]:
    """An mlx schedule that looks the rate up by the optimizer's step counter (works under `mx.compile` too)."""
    import mlx.core as mx

    table = mx.array(rates, dtype=mx.float32)
    last = len(rates) - 1

    def schedule(step: Any) -> Any:
        return table[mx.minimum(step, last).astype(mx.int32)]

    return schedule


def build_optimizer(
    name: str, schedule: Callable[[Any], Any], *, weight_decay: float, betas: Tuple[float, float], eps: float
) -> Any:
    import mlx.optimizers as optimizers

    kind = canonical_optimizer_name(name)
    if kind == "adamw":
        # Bias correction on, as torch's AdamW does; mlx leaves it off by default.
        return optimizers.AdamW(
            learning_rate=schedule, betas=list(betas), eps=eps, weight_decay=weight_decay, bias_correction=True
        )
    if kind == "adam":
        return optimizers.Adam(learning_rate=schedule, betas=list(betas), eps=eps, bias_correction=True)
    if kind == "sgd":
        return optimizers.SGD(learning_rate=schedule, weight_decay=weight_decay)
    if kind == "adafactor":
        # A given learning rate, not Adafactor's own relative step, as Hugging Face's Trainer configures it.
        return optimizers.Adafactor(
            learning_rate=schedule, relative_step=False, scale_parameter=False, weight_decay=weight_decay
        )
    return optimizers.Lion(learning_rate=schedule, weight_decay=weight_decay)


def clip_gradients(grads: Any, mode: str, max_norm: float, max_value: float) -> Tuple[Any, Any]:
    """Clipped gradients and the global norm measured before clipping (what gets logged as `grad_norm`)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map

    def norm(array: Any) -> Any:
        return mx.sqrt(array.astype(mx.float32).square().sum())

    total = mx.sqrt(sum(array.astype(mx.float32).square().sum() for _, array in tree_flatten(grads)))
    if mode == "global_norm" and max_norm > 0:
        scale = mx.minimum(1.0, max_norm / (total + _NORM_EPSILON))
        grads = tree_map(lambda array: (array * scale).astype(array.dtype), grads)
    elif mode == "per_tensor_norm" and max_norm > 0:
        grads = tree_map(
            lambda array: (array * mx.minimum(1.0, max_norm / (norm(array) + _NORM_EPSILON))).astype(array.dtype), grads
        )
    elif mode == "value" and max_value > 0:
        grads = tree_map(lambda array: mx.clip(array, -max_value, max_value), grads)
    elif mode not in CLIP_MODES:
        raise ValueError(f"unknown clip mode {mode!r}")
    return grads, total
