# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Optimizer and learning-rate schedule names as CUDA notebooks write them, turned into the MLX backend's names."""

from __future__ import annotations

from typing import Any, Dict

from unsloth_zoo.mlx.optim import SCHEDULES

_ADAMW = (
    "adamw",
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_hf",
    "adamw_apex_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_anyprecision",
    "adamw_8bit",
    "adamw_bnb_8bit",
    "adamw_32bit",
    "adamw_torch_4bit",
    "adamw_torch_8bit",
    "paged_adamw",
    "paged_adamw_8bit",
    "paged_adamw_32bit",
)
_LION = ("lion", "lion_8bit", "lion_32bit", "paged_lion", "paged_lion_8bit", "paged_lion_32bit")

# Each CUDA optimizer name and the MLX optimizer with the same update rule (8-bit and paged states only save memory).
OPTIMIZERS: Dict[str, str] = {
    **{name: "adamw" for name in _ADAMW},
    **{name: "lion" for name in _LION},
    "adam": "adam",
    "sgd": "sgd",
    "adafactor": "adafactor",
}


def normalised_name(value: Any) -> str:
    """`OptimizerNames.ADAMW_TORCH`, "SchedulerType.COSINE" or "Adamw-Torch" as "adamw_torch" / "cosine"."""
    text = str(getattr(value, "value", value))
    return text.strip().rsplit(".", 1)[-1].lower().replace("-", "_")


def mlx_optimizer(value: Any) -> str:
    """The MLX optimizer doing the job of the named CUDA optimizer; ValueError listing the names known here."""
    name = normalised_name(value)
    if name not in OPTIMIZERS:
        raise ValueError(
            f"optim={value!r} has no MLX equivalent; supported optimizers: {', '.join(sorted(OPTIMIZERS))}"
        )
    return OPTIMIZERS[name]


def mlx_schedule(value: Any) -> str:
    """The schedule name the backend knows; ValueError listing them for any other."""
    name = normalised_name(value)
    if name not in SCHEDULES:
        raise ValueError(
            f"lr_scheduler_type={value!r} is not supported on MLX; supported schedules: {', '.join(SCHEDULES)}"
        )
    return name
