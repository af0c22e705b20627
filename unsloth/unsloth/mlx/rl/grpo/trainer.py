# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`GRPOTrainer` on MLX: TRL's GRPO with completions sampled on the training model by mlx_lm's batched generation.

Each optimizer step takes `generation_batch_size / num_generations` prompts, samples `num_generations` completions
for each in one continuous batch, scores them with every reward function (TRL's call: `prompts`, `completions`,
`completion_ids` and the dataset's other columns as keywords), turns the rewards into group-relative advantages
and trains on `gradient_accumulation_steps` micro-batches. The KL reference (`beta > 0`) is the model with its
LoRA adapters off. Logs carry TRL's metric names and go through the same Hugging Face callbacks as SFT.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from unsloth_zoo.mlx.callbacks import CallbackHandler, FlowCallback, TrainerControl, TrainerState
from unsloth_zoo.mlx.checkpoint import rotate_checkpoints, save_checkpoint, save_model_files
from unsloth_zoo.mlx.checkpointing import gradient_checkpointing, wants_gradient_checkpointing
from unsloth_zoo.mlx.optim import build_optimizer, build_schedule, clip_gradients, learning_rates, resolve_warmup_steps
from unsloth_zoo.mlx.trainer import TrainOutput

from ...models.batched_sampling import Sampled, Sampling, eos_token_ids, sample_batch
from ...training.trainer import _progress_callbacks
from ..config import method_arguments
from ..grpo_config import GRPOConfig
from .loss import (
    LossSettings,
    build_batch,
    completion_logps,
    completion_metrics,
    group_advantages,
    loss_metrics,
    policy_loss,
)
from ..reference import ReferencePolicy

# Columns the trainer fills itself; every other dataset column reaches the reward functions by name.
_OWN_COLUMNS = ("prompt", "completion", "completion_ids")


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) and "role" in item for item in value)


def _reward_name(function: Any, index: int) -> str:
    return getattr(function, "__name__", None) or f"reward_{index}"


def _dataset_rows(dataset: Any) -> List[Dict[str, Any]]:
    if dataset is None:
        raise ValueError("GRPOTrainer needs train_dataset, with a 'prompt' column")
    rows = [dict(row) for row in dataset]
    if not rows:
        raise ValueError("train_dataset has no rows")
    for index, row in enumerate(rows):
        prompt = row.get("prompt")
        if not isinstance(prompt, str) and not is_conversation(prompt):
            found = "no 'prompt'" if "prompt" not in row else f"a prompt of type {type(prompt).__name__}"
            raise ValueError(
                f"train_dataset row {index} has {found}: GRPO needs a 'prompt' column of strings or conversations "
                "(lists of {'role', 'content'} messages)"
            )
    return rows


class GRPOTrainer:
    """TRL's `GRPOTrainer(model, reward_funcs, args, train_dataset, processing_class)` on an mlx_lm model."""

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Optional[Sequence[Any]] = None,
        optimizers: Any = (None, None),
        peft_config: Any = None,
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"GRPOTrainer got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        if peft_config is not None:
            raise NotImplementedError(
                "peft_config: put LoRA on the model with FastLanguageModel.get_peft_model(model, ...) first"
            )
        if optimizers not in ((None, None), None):
            raise NotImplementedError("optimizers: choose the optimizer with optim= in GRPOConfig")
        if eval_dataset is not None:
            raise NotImplementedError("eval_dataset: GRPO evaluation is not available on MLX")
        self.args = method_arguments(GRPOConfig, args)
        self.model = model
        self.tokenizer = self.processing_class = processing_class if processing_class is not None else tokenizer
        if self.tokenizer is None:
            raise ValueError("GRPOTrainer needs processing_class (the model's tokenizer)")
        functions = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        for index, function in enumerate(functions):
            if not callable(function) or isinstance(function, str):
                raise NotImplementedError(
                    f"reward_funcs[{index}]={function!r}: only Python reward functions run on MLX, not reward models"
                )
        if not functions:
            raise ValueError("reward_funcs is empty: give at least one reward function")
        self.reward_funcs = functions
        self.reward_func_names = [_reward_name(function, index) for index, function in enumerate(functions)]
        weights = self.args.reward_weights
        if weights is not None and len(weights) != len(functions):
            raise ValueError(f"reward_weights has {len(weights)} values for {len(functions)} reward functions")
        self.reward_weights = [1.0] * len(functions) if weights is None else [float(value) for value in weights]
        self.rows = _dataset_rows(train_dataset)
        self.train_dataset = train_dataset
        self.eval_rows = None
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else (eos_token_ids(self.tokenizer) or [0])[0])
        self.num_generations = self.args.num_generations
        self.reference = ReferencePolicy(model) if self.args.beta != 0.0 else None
        self.optimizer: Any = None
        self.state = TrainerState()
        self.control = TrainerControl()
        self.callback_handler = CallbackHandler(
            [FlowCallback, *_progress_callbacks(self.args), *(callbacks or [])], model, self.tokenizer
        )
        self._metrics: Dict[str, List[float]] = {}
        self.control = self._fire("on_init_end")

    # ---- callbacks, optimizer, logs, checkpoints (the SFT trainer's events and files) ----

    def add_callback(self, callback: Any) -> None:
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback: Any) -> Any:
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callback_handler.remove_callback(callback)

    def _fire(self, event: str, **kwargs: Any) -> TrainerControl:
        self.control = self.callback_handler.fire(event, self.args, self.state, self.control, **kwargs)
        return self.control

    def _create_optimizer(self, max_steps: int) -> None:
        args = self.args
        warmup = resolve_warmup_steps(args.warmup_steps, args.warmup_ratio, max_steps)
        self._rates = learning_rates(args.lr_scheduler_type, args.learning_rate, warmup, max_steps)
        self.lr_scheduler = build_schedule(self._rates)
        self.optimizer = build_optimizer(
            args.optim,
            self.lr_scheduler,
            weight_decay=args.weight_decay,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
        )
        self.optimizer.init(self.model.trainable_parameters())
        self.callback_handler.optimizer = self.optimizer
        self.callback_handler.lr_scheduler = self.lr_scheduler

    def log(self, logs: Dict[str, float]) -> None:
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self._fire("on_log", logs=logs)

    def _save_checkpoint(self) -> None:
        output_dir = Path(self.args.output_dir)
        save_checkpoint(output_dir, self.model, self.optimizer, self.state, self.args, self.args.save_only_model)
        rotate_checkpoints(output_dir, self.args.save_total_limit, None)

    def save_model(self, output_dir: Optional[str] = None) -> None:
        save_model_files(Path(output_dir or self.args.output_dir), self.model, self.tokenizer)

    # ---- prompts and sampling ----

    def prompt_text(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> str:
        """The rendered prompt; a string column of `row` that the chat template names (a gpt-oss notebook's
        `reasoning_effort`) is passed to the template, as CUDA Unsloth's GRPO does."""
        if is_conversation(prompt):
            options = dict(self.args.chat_template_kwargs or {})
            template = self.tokenizer.chat_template if isinstance(self.tokenizer.chat_template, str) else ""
            for key, value in (row or {}).items():
                if key not in _OWN_COLUMNS and isinstance(value, str) and key in template:
                    options[key] = value
            return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **options)
        return prompt

    def prompt_ids(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> List[int]:
        """The prompt's tokens, as TRL 0.22 made them: no special tokens added, the last `max_prompt_length` kept."""
        ids = list(self.tokenizer(self.prompt_text(prompt, row), add_special_tokens=False)["input_ids"])
        limit = self.args.max_prompt_length
        return ids[-limit:] if limit is not None else ids

    def sampling(self) -> Sampling:
        """The config's sampling, overridden by the fields a notebook's `vllm_sampling_params` sets."""
        args = self.args
        values: Dict[str, Any] = {
            "max_tokens": int(args.max_completion_length),
            "temperature": float(args.temperature),
            "top_p": float(args.top_p),
            "top_k": int(args.top_k or 0),
            "min_p": float(args.min_p or 0.0),
            "repetition_penalty": float(args.repetition_penalty),
            "seed": None,
        }
        params = args.vllm_sampling_params
        if params is not None:
            values.update(
                top_p=float(params.top_p),
                top_k=max(int(params.top_k), 0),
                min_p=float(params.min_p or 0.0),
                repetition_penalty=float(params.repetition_penalty),
                seed=params.seed,
                stop=tuple([params.stop] if isinstance(params.stop, str) else params.stop or ()),
                include_stop_str_in_output=bool(params.include_stop_str_in_output),
                stop_token_ids=tuple(params.stop_token_ids or ()),
            )
        return Sampling(**values)

    def sample_completions(self, prompt_ids: List[List[int]]) -> List[Sampled]:
        """`num_generations` completions of each prompt, sampled together on the training model."""
        rows = [ids for ids in prompt_ids for _ in range(self.num_generations)]
        sampling = self.sampling()
        if sampling.seed is not None:
            # A fixed seed would draw the same completions every step; the step keeps them reproducible yet new.
            sampling = Sampling(**{**sampling.__dict__, "seed": int(sampling.seed) + self.state.global_step})
        was_training = self.model.training
        self.model.eval()
        try:
            return sample_batch(self.model, self.tokenizer, rows, sampling)
        finally:
            if was_training:
                self.model.train()

    # ---- rewards ----

    def score(self, rows: List[Dict[str, Any]], completions: List[Any], completion_ids: List[List[int]]) -> np.ndarray:
        """Each reward function's values for every completion; one message naming a function that fails."""
        prompts = [row["prompt"] for row in rows]
        columns = {key: [row.get(key) for row in rows] for key in rows[0] if key not in _OWN_COLUMNS}
        scores = np.zeros((len(rows), len(self.reward_funcs)), dtype=np.float32)
        for index, (function, name) in enumerate(zip(self.reward_funcs, self.reward_func_names)):
            try:
                values = function(
                    prompts=prompts,
                    completions=completions,
                    completion_ids=completion_ids,
                    trainer_state=self.state,
                    **columns,
                )
            except Exception as error:
                raise RuntimeError(f"reward function {name!r} raised {type(error).__name__}: {error}") from error
            values = list(values) if values is not None else []
            if len(values) != len(rows):
                raise ValueError(
                    f"reward function {name!r} returned {len(values)} rewards for {len(rows)} completions; "
                    "it must return one number (or None) per completion"
                )
            try:
                scores[:, index] = [np.nan if value is None else float(value) for value in values]
            except (TypeError, ValueError) as error:
                raise ValueError(f"reward function {name!r} returned a value that is not a number: {error}") from None
        return scores

    # ---- one step ----

    def _generation_batch(self, epoch_order: np.ndarray, position: int) -> List[Dict[str, Any]]:
        count = self.args.generation_batch_size // self.num_generations
        picked = [int(epoch_order[(position + offset) % len(epoch_order)]) for offset in range(count)]
        return [self.rows[index] for index in picked]

    def _step(self, prompt_rows: List[Dict[str, Any]]) -> Dict[str, float]:
        args = self.args
        generations = self.num_generations
        prompt_ids = [self.prompt_ids(row["prompt"], row) for row in prompt_rows]
        sampled = self.sample_completions(prompt_ids)
        rows = [row for row in prompt_rows for _ in range(generations)]
        all_prompt_ids = [ids for ids in prompt_ids for _ in range(generations)]
        completion_ids = [item.token_ids for item in sampled]
        texts = [item.text for item in sampled]
        conversational = is_conversation(rows[0]["prompt"])
        completions = [[{"role": "assistant", "content": text}] for text in texts] if conversational else texts
        terminated = [item.finish_reason == "stop" for item in sampled]
        masks = [
            [0 if args.mask_truncated_completions and not ended else 1] * len(ids)
            for ids, ended in zip(completion_ids, terminated)
        ]
        scores = group_advantages(
            self.score(rows, completions, completion_ids),
            self.reward_weights,
            generations,
            args.scale_rewards,
            self.reward_func_names,
        )
        metrics = {**completion_metrics([len(ids) for ids in completion_ids], terminated), **scores.metrics}
        metrics["num_tokens"] = float(sum(len(p) + len(c) for p, c in zip(all_prompt_ids, completion_ids)))
        step_loss = self._train_on(all_prompt_ids, completion_ids, masks, scores.advantages, metrics)
        metrics["loss"] = step_loss
        return metrics

    def _train_on(
        self,
        prompt_ids: List[List[int]],
        completion_ids: List[List[int]],
        masks: List[List[int]],
        advantages: np.ndarray,
        metrics: Dict[str, float],
        old_logps: Optional[List[np.ndarray]] = None,
    ) -> float:
        args = self.args
        size = args.per_device_train_batch_size
        steps = args.gradient_accumulation_steps
        settings = self.loss_settings()
        tokens_in_batch = float(sum(sum(mask) for mask in masks))
        normalizer = mx.array(tokens_in_batch if settings.loss_type == "dapo" else float(steps))
        loss_and_grad = nn.value_and_grad(
            self.model, lambda model, batch: policy_loss(model, batch, settings, normalizer)
        )
        grads, total, collected = None, 0.0, []
        for start in range(0, len(prompt_ids), size):
            part = slice(start, start + size)
            old = None if old_logps is None else old_logps[part]
            batch = build_batch(
                prompt_ids[part], completion_ids[part], masks[part], advantages[part], self.pad_id, old_logps=old
            )
            if self.reference is not None:
                batch.ref_logps = self.reference.run(
                    lambda model: completion_logps(model, batch, settings.temperature, differentiable=False)  # noqa: B023
                )
            (loss, pieces), micro = loss_and_grad(self.model, batch)
            grads = micro if grads is None else tree_map(mx.add, grads, micro)
            mx.eval(loss, grads)
            total += float(loss.item())
            collected.append(loss_metrics(pieces, batch, settings))
        grads, grad_norm = clip_gradients(grads, args.grad_clip_mode, args.max_grad_norm, args.max_grad_value)
        self.optimizer.update(self.model, grads)
        mx.eval(self.model.parameters(), self.optimizer.state, grad_norm)
        for name in collected[0]:
            metrics[name] = float(np.mean([values[name] for values in collected]))
        metrics["grad_norm"] = float(grad_norm.item())
        return total

    def loss_settings(self) -> LossSettings:
        args = self.args
        return LossSettings(
            loss_type=args.loss_type,
            beta=float(args.beta),
            epsilon_low=float(args.epsilon),
            epsilon_high=float(args.epsilon_high),
            temperature=float(args.temperature),
            max_completion_length=int(args.max_completion_length),
            delta=args.delta,
            importance_sampling_level=args.importance_sampling_level,
            bias_correction_kl=bool(args.use_bias_correction_kl),
        )

    # ---- the loop ----

    def _plan(self) -> tuple:
        prompts_per_step = self.args.generation_batch_size // self.num_generations
        steps_per_epoch = max(math.ceil(len(self.rows) / prompts_per_step), 1)
        if self.args.max_steps > 0:
            return self.args.max_steps, steps_per_epoch
        return math.ceil(self.args.num_train_epochs * steps_per_epoch), steps_per_epoch

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.args.shuffle_dataset:
            return np.arange(len(self.rows))
        return np.random.default_rng(self.args.seed + epoch).permutation(len(self.rows))

    def train(self, resume_from_checkpoint: Any = None, **_: Any) -> TrainOutput:
        if resume_from_checkpoint not in (None, False):
            raise NotImplementedError("resume_from_checkpoint: GRPO on MLX starts each run afresh")
        requested = wants_gradient_checkpointing(self.model, getattr(self.args, "gradient_checkpointing", False))
        with gradient_checkpointing(self.model, requested):
            return self._train_steps()

    def _train_steps(self) -> TrainOutput:
        args = self.args
        max_steps, steps_per_epoch = self._plan()
        self._create_optimizer(max_steps)
        self.state = TrainerState(train_batch_size=args.per_device_train_batch_size)
        self.state.compute_steps(args, max_steps)
        self.state.max_steps = max_steps
        self.state.num_train_epochs = math.ceil(max_steps / steps_per_epoch)
        self.model.train()
        prompts_per_step = args.generation_batch_size // self.num_generations
        window: List[Dict[str, float]] = []
        total_loss, start = 0.0, time.time()
        self._fire("on_train_begin")
        for step in range(max_steps):
            epoch, step_in_epoch = divmod(step, steps_per_epoch)
            if step_in_epoch == 0:
                self._fire("on_epoch_begin")
            self._fire("on_step_begin")
            mx.random.seed(args.seed + step)
            order = self._epoch_order(epoch)
            metrics = self._step(self._generation_batch(order, step_in_epoch * prompts_per_step))
            total_loss += metrics["loss"]
            window.append(metrics)
            self.state.num_input_tokens_seen += int(metrics["num_tokens"])
            self.state.global_step += 1
            self.state.epoch = epoch + (step_in_epoch + 1) / steps_per_epoch
            self._fire("on_step_end")
            if self.control.should_log:
                self.log(self._window_logs(window, step))
                window = []
            if self.control.should_save:
                self._save_checkpoint()
                self._fire("on_save")
            if step_in_epoch == steps_per_epoch - 1:
                self._fire("on_epoch_end")
            if self.control.should_training_stop:
                break
        runtime = time.time() - start
        steps = max(self.state.global_step, 1)
        result = {"train_runtime": round(runtime, 4), "train_loss": total_loss / steps}
        if runtime > 0:
            result["train_steps_per_second"] = round(steps / runtime, 3)
        self.log(dict(result))
        save_model_files(Path(args.output_dir), self.model, self.tokenizer)
        self._fire("on_train_end")
        return TrainOutput(self.state.global_step, total_loss / steps, result)

    def _window_logs(self, window: List[Dict[str, float]], step: int) -> Dict[str, float]:
        """The logged values: each metric averaged over the steps since the last log, as TRL averages them."""
        logs = {name: float(np.mean([values[name] for values in window if name in values])) for name in window[-1]}
        logs["num_tokens"] = float(self.state.num_input_tokens_seen)
        logs["learning_rate"] = self._rates[min(step, len(self._rates) - 1)]
        return logs

    def evaluate(self) -> dict:
        raise NotImplementedError("GRPO evaluation is not available on MLX")
