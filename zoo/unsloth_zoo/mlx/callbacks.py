# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Trainer state, control flags and event dispatch compatible with Hugging Face's callbacks, without torch.

`TrainerState` and `TrainerControl` carry the same field names as `transformers.trainer_callback`'s, so
`EarlyStoppingCallback`, `ProgressCallback` and `PrinterCallback` work on them unchanged; `FlowCallback`
applies `DefaultFlowCallback`'s cadence rules to our config.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

logger = logging.getLogger(__name__)

EVENTS = (
    "on_init_end",
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_step_begin",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_substep_end",
    "on_step_end",
    "on_evaluate",
    "on_predict",
    "on_save",
    "on_log",
    "on_prediction_step",
    "on_push_begin",
)
# Each event clears the requests it answers before callbacks see it, so a callback can raise them again.
_CLEARED_BEFORE = {
    "on_train_begin": ("should_training_stop",),
    "on_epoch_begin": ("should_epoch_stop",),
    "on_step_begin": ("should_log", "should_evaluate", "should_save"),
    "on_evaluate": ("should_evaluate",),
    "on_save": ("should_save",),
    "on_log": ("should_log",),
}


@dataclass
class TrainerState:
    epoch: float = 0
    global_step: int = 0
    max_steps: int = 0
    logging_steps: int = 500
    eval_steps: int = 500
    save_steps: int = 500
    train_batch_size: Optional[int] = None
    num_train_epochs: int = 0
    num_input_tokens_seen: int = 0
    total_flos: float = 0
    log_history: List[Dict[str, float]] = field(default_factory=list)
    best_metric: Optional[float] = None
    best_global_step: Optional[int] = None
    best_model_checkpoint: Optional[str] = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: Optional[str] = None
    trial_params: Optional[Dict[str, Any]] = None
    stateful_callbacks: Dict[str, Any] = field(default_factory=dict)

    def compute_steps(self, args: Any, max_steps: int) -> None:
        """Logging, eval and save intervals as whole steps: a value in (0, 1) is a share of the run."""
        for kind in ("logging", "eval", "save"):
            interval = getattr(args, f"{kind}_steps")
            if interval is None:
                continue
            if 0 < interval < 1:
                interval = math.ceil(max_steps * interval)
            setattr(self, f"{kind}_steps", int(interval))

    def to_json_string(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    def save_to_json(self, json_path: str) -> None:
        with open(json_path, "w", encoding="utf-8") as stream:
            stream.write(self.to_json_string())

    @classmethod
    def load_from_json(cls, json_path: str) -> "TrainerState":
        """Read a state file, ours or Hugging Face's; keys this class does not know are ignored."""
        with open(json_path, encoding="utf-8") as stream:
            values = json.load(stream)
        known = {item.name for item in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})


@dataclass
class TrainerControl:
    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False

    def _new_training(self) -> None:
        self.should_training_stop = False

    def _new_epoch(self) -> None:
        self.should_epoch_stop = False

    def _new_step(self) -> None:
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False

    def state(self) -> dict:
        return {"args": dataclasses.asdict(self), "attributes": {}}

    @classmethod
    def from_state(cls, state: dict) -> "TrainerControl":
        return cls(**state["args"])


def _due(step: int, interval: int) -> bool:
    return interval > 0 and step % interval == 0


class FlowCallback:
    """When to log, evaluate and save, by the same rules as Hugging Face's `DefaultFlowCallback`."""

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl:
        step = state.global_step
        if step == 1 and args.logging_first_step:
            control.should_log = True
        if args.logging_strategy == "steps" and _due(step, state.logging_steps):
            control.should_log = True
        evaluating_by_steps = args.eval_strategy == "steps" and args.eval_delay <= step
        if evaluating_by_steps and _due(step, state.eval_steps):
            control.should_evaluate = True
        if args.save_strategy == "steps" and _due(step, state.save_steps):
            control.should_save = True
        if step >= state.max_steps:
            control.should_training_stop = True
            # The last step is always evaluated and saved under a step strategy, once.
            if evaluating_by_steps and not _due(step, state.eval_steps):
                control.should_evaluate = True
            if args.save_strategy == "steps":
                control.should_save = True
        return control

    def on_epoch_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if args.logging_strategy == "epoch":
            control.should_log = True
        if args.eval_strategy == "epoch" and args.eval_delay <= state.epoch:
            control.should_evaluate = True
        if args.save_strategy == "epoch":
            control.should_save = True
        return control


class CallbackHandler:
    """Holds the callbacks in order and fires each event through all of them, as Hugging Face's handler does."""

    def __init__(self, callbacks: Iterable[Any], model: Any = None, processing_class: Any = None) -> None:
        self.callbacks: List[Any] = []
        for callback in callbacks:
            self.add_callback(callback)
        self.model = model
        self.processing_class = processing_class
        self.optimizer: Any = None
        self.lr_scheduler: Any = None
        self.train_dataloader: Any = None
        self.eval_dataloader: Any = None

    def add_callback(self, callback: Any) -> None:
        instance = callback() if isinstance(callback, type) else callback
        kind = callback if isinstance(callback, type) else type(callback)
        if any(type(existing) is kind for existing in self.callbacks):
            logger.warning("adding a second %s; the callbacks are now: %s", kind.__name__, self.callback_list)
        self.callbacks.append(instance)

    def pop_callback(self, callback: Any) -> Any:
        """Remove and return the first callback of that class, or that very instance; None when absent."""
        for existing in self.callbacks:
            if (isinstance(callback, type) and isinstance(existing, callback)) or existing is callback:
                self.callbacks.remove(existing)
                return existing
        return None

    def remove_callback(self, callback: Any) -> None:
        if self.pop_callback(callback) is None and not isinstance(callback, type):
            raise ValueError(f"{callback!r} is not among the callbacks")

    @property
    def callback_list(self) -> str:
        return "\n".join(type(callback).__name__ for callback in self.callbacks)

    def fire(self, event: str, args: Any, state: TrainerState, control: Any, **kwargs: Any) -> Any:
        """Run `event` on every callback in order; a callback that returns a control replaces it for the rest."""
        for flag in _CLEARED_BEFORE.get(event, ()):
            setattr(control, flag, False)
        for callback in self.callbacks:
            handler = getattr(callback, event, None)
            if handler is None:
                continue
            result = handler(
                args,
                state,
                control,
                model=self.model,
                processing_class=self.processing_class,
                optimizer=self.optimizer,
                lr_scheduler=self.lr_scheduler,
                train_dataloader=self.train_dataloader,
                eval_dataloader=self.eval_dataloader,
                **kwargs,
            )
            if result is not None:
                control = result
        return control
