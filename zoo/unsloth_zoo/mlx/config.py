# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""`MLXTrainingConfig`: the MLX trainer's arguments, named as Hugging Face's `TrainingArguments` names them.

Fields bind positionally in declared order and new fields are only ever appended, so positional calls keep
working across releases. Hugging Face callbacks read these same names (`eval_strategy`, `metric_for_best_model`...).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..dataset_num_proc import get_dataset_num_proc
from ..dataset_num_proc import record_intent
from .optim import CLIP_MODES, SCHEDULES, canonical_optimizer_name

STRATEGIES = ("no", "steps", "epoch")
DATASET_ORDERS = ("default", "sequential", "length")
_SANITIZED_TYPES = (bool, int, float, str)


def _strategy(value: Any, name: str) -> str:
    """A strategy as its plain string; Hugging Face's enum members are accepted through their value."""
    text = str(getattr(value, "value", value)).lower()
    if text not in STRATEGIES:
        raise ValueError(f"{name} must be one of {', '.join(STRATEGIES)}, got {value!r}")
    return text


@dataclass
class MLXTrainingConfig:
    """The MLX trainer's arguments; their names and defaults are Hugging Face's unless said otherwise.

    Losses are token-weighted as Hugging Face's `Trainer` weighs them with `num_items_in_batch`: an optimizer step's
    loss is the sum of every target token's loss over its micro-batches divided by the step's target count. The
    eval loss is the `Trainer`'s too, not token-weighted: each eval batch's token mean, credited to each of its
    rows, averaged over the rows (a batch weighs by its row count, not its token count), so `eval_loss` and early
    stopping agree with CUDA Unsloth's.
    """

    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    max_steps: int = 60
    num_train_epochs: float = -1
    warmup_steps: float = 5
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "linear"
    optim: str = "adamw"
    weight_decay: float = 0.001
    seed: int = 3407
    logging_steps: float = 1
    output_dir: str = "./outputs"
    max_seq_length: int = 2048
    dataset_text_field: str = "text"
    append_eos: bool = True
    dataset_order: str = "default"
    dataset_num_proc: Optional[int] = None
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    grad_clip_mode: str = "global_norm"
    max_grad_value: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    per_device_eval_batch_size: int = 8
    logging_strategy: str = "steps"
    logging_first_step: bool = False
    eval_strategy: str = "no"
    eval_steps: Optional[float] = None
    eval_delay: float = 0
    save_strategy: str = "steps"
    save_steps: float = 500
    save_total_limit: Optional[int] = None
    save_only_model: bool = False
    load_best_model_at_end: bool = False
    metric_for_best_model: Optional[str] = None
    greater_is_better: Optional[bool] = None
    mx_compile: Optional[bool] = None
    pad_to_multiple_of: Optional[int] = None
    # Hugging Face's name; True (or CUDA Unsloth's "unsloth") recomputes each block's activations in the backward pass.
    gradient_checkpointing: Union[bool, str] = False

    def __post_init__(self) -> None:
        for name in ("logging_strategy", "eval_strategy", "save_strategy"):
            setattr(self, name, _strategy(getattr(self, name), name))
        if self.lr_scheduler_type not in SCHEDULES:
            raise ValueError(f"lr_scheduler_type must be one of {', '.join(SCHEDULES)}, got {self.lr_scheduler_type!r}")
        if self.grad_clip_mode not in CLIP_MODES:
            raise ValueError(f"grad_clip_mode must be one of {', '.join(CLIP_MODES)}, got {self.grad_clip_mode!r}")
        if self.dataset_order not in DATASET_ORDERS:
            raise ValueError(f"dataset_order must be one of {', '.join(DATASET_ORDERS)}, got {self.dataset_order!r}")
        canonical_optimizer_name(self.optim)
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise ValueError("set max_steps > 0 (step mode) or num_train_epochs > 0 (epoch mode)")
        if self.eval_steps is None:
            self.eval_steps = self.logging_steps
        if self.load_best_model_at_end and self.metric_for_best_model is None:
            self.metric_for_best_model = "loss"
        if self.greater_is_better is None and self.metric_for_best_model is not None:
            self.greater_is_better = not self.metric_for_best_model.endswith("loss")
        requested = self.dataset_num_proc
        self.dataset_num_proc = get_dataset_num_proc(requested, serial_as_none=False)
        record_intent(self, requested)

    @property
    def train_batch_size(self) -> int:
        return self.per_device_train_batch_size

    @property
    def eval_batch_size(self) -> int:
        return self.per_device_eval_batch_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_sanitized_dict(self) -> dict:
        """Only bools, ints, floats and strings, as experiment trackers accept; anything else becomes its str()."""
        merged = {**self.to_dict(), "train_batch_size": self.train_batch_size, "eval_batch_size": self.eval_batch_size}
        return {key: value if type(value) in _SANITIZED_TYPES else str(value) for key, value in merged.items()}


_FIELD_NAMES = tuple(item.name for item in dataclasses.fields(MLXTrainingConfig))
_GENERATED_INIT = MLXTrainingConfig.__init__


@functools.wraps(_GENERATED_INIT)
def _checked_init(self: MLXTrainingConfig, *args: Any, **kwargs: Any) -> None:
    unknown = sorted(set(kwargs) - set(_FIELD_NAMES))
    if unknown:
        raise TypeError(f"MLXTrainingConfig got unexpected keyword argument(s): {', '.join(unknown)}")
    _GENERATED_INIT(self, *args, **kwargs)
    # Epochs asked for without a step count mean epoch mode, since the default max_steps would otherwise win.
    given = set(_FIELD_NAMES[: len(args)]) | set(kwargs)
    if "num_train_epochs" in given and "max_steps" not in given and self.num_train_epochs > 0:
        self.max_steps = -1
    # Likewise a warmup ratio asked for without a step count replaces the default five warmup steps.
    if "warmup_ratio" in given and "warmup_steps" not in given and self.warmup_ratio > 0:
        self.warmup_steps = 0
    # An explicit eval_steps with no strategy means "evaluate by steps" once the trainer sees an eval_dataset.
    # Not a field, so it stays out of the config's keywords, repr and saved JSON.
    self.eval_strategy_unset = (  # type: ignore[attr-defined]
        "eval_steps" in given and "eval_strategy" not in given and self.eval_steps is not None
    )


MLXTrainingConfig.__init__ = _checked_init  # type: ignore[method-assign]


def coerce_config(args: Any) -> MLXTrainingConfig:
    """A private copy of the caller's arguments: our config, a dict, or any object with `to_dict()` (TrainingArguments)."""
    if args is None:
        return MLXTrainingConfig()
    if isinstance(args, MLXTrainingConfig):
        return copy.deepcopy(args)
    values = args if isinstance(args, dict) else args.to_dict()
    if not isinstance(args, dict):
        # A foreign arguments object carries many fields of its own; keep the ones this config knows.
        values = {key: value for key, value in values.items() if key in _FIELD_NAMES}
    return MLXTrainingConfig(**copy.deepcopy(values))
