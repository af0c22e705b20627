# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""`MLXTrainer`: trains an mlx_lm model on a text dataset and drives Hugging Face callbacks event by event.

The loop has the shape of Hugging Face's `Trainer`: epochs of optimizer steps, each step one or more
micro-batches, then log / evaluate / save when the control flags ask for it, so callbacks see the same events
in the same order with the same state.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from .callbacks import CallbackHandler, FlowCallback, TrainerControl, TrainerState
from .checkpoint import (
    load_best_weights,
    load_checkpoint,
    rotate_checkpoints,
    save_checkpoint,
    save_model_files,
    sorted_checkpoints,
)
from .backward_order import evaluate_gradients
from .checkpointing import gradient_checkpointing, wants_gradient_checkpointing
from .chunked_loss import output_head
from .config import MLXTrainingConfig, coerce_config
from .data import EncodeRows, TokenizedRows, epoch_batches, pad_batch, tokenize_dataset
from .distributed import WORLD_FILE, World, check_world_size, current_world, shard, world_file_text
from ..dataset_num_proc import map_request
from .loss import masked_cross_entropy
from .memory_guard import check_memory_fits
from .optim import build_optimizer, build_schedule, clip_gradients, learning_rates, resolve_warmup_steps


logger = logging.getLogger(__name__)


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float
    metrics: dict


class TrainingPlan(NamedTuple):
    batches_per_epoch: int
    steps_per_epoch: int
    max_steps: int
    num_epochs: int


def plan_training(rows: int, args: MLXTrainingConfig, world_size: int = 1) -> TrainingPlan:
    """Totals the way Hugging Face counts them: a partial accumulation at an epoch's end is still a step."""
    batches = math.ceil(rows / (args.per_device_train_batch_size * world_size))
    steps_per_epoch = max(math.ceil(batches / args.gradient_accumulation_steps), 1)
    if args.max_steps > 0:
        return TrainingPlan(batches, steps_per_epoch, args.max_steps, math.ceil(args.max_steps / steps_per_epoch))
    return TrainingPlan(
        batches, steps_per_epoch, math.ceil(args.num_train_epochs * steps_per_epoch), math.ceil(args.num_train_epochs)
    )


_noted_eval_by_steps = False


def _note_eval_by_steps(eval_steps: Any) -> None:
    """Say once per process that an explicit eval_steps switched evaluation on, as CUDA Unsloth does."""
    global _noted_eval_by_steps
    if not _noted_eval_by_steps:
        _noted_eval_by_steps = True
        logger.warning(
            "eval_steps=%s was given with an eval_dataset and no eval_strategy: evaluating every %s steps "
            "(eval_strategy='steps')",
            eval_steps,
            eval_steps,
        )


def weighted_by_count(loss: mx.array, grads: Any, count: mx.array) -> Tuple[mx.array, Any]:
    """`loss` and every gradient multiplied by a target count, each gradient keeping its dtype."""
    factor = count.astype(mx.float32)
    return loss * factor, tree_map(lambda array: (array * factor).astype(array.dtype), grads)


def per_target(loss_sum: mx.array, grads: Any, targets: mx.array) -> Tuple[mx.array, Any]:
    """Count-weighted sums made token-weighted means: divided by the target count (at least 1), dtypes kept."""
    total = mx.maximum(targets, 1).astype(mx.float32)
    return loss_sum / total, tree_map(lambda array: (array / total).astype(array.dtype), grads)


def _exportable(callback: Any) -> bool:
    """Hugging Face's `ExportableState` contract, checked by shape so transformers need not be imported."""
    return callable(getattr(callback, "state", None)) and hasattr(type(callback), "from_state")


class MLXTrainer:
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        train_dataset: Any,
        eval_dataset: Any = None,
        *,
        formatting_func: Any = None,
        args: Any = None,
        callbacks: Optional[Iterable[Any]] = None,
    ) -> None:
        self.args = coerce_config(args)
        self.model = model
        self.world: World = current_world()
        self.tokenizer = tokenizer
        encode = EncodeRows(
            tokenizer, self.args.dataset_text_field, formatting_func, self.args.max_seq_length, self.args.append_eos
        )
        # Each split re-asks the policy with its own rows, unless the config's count was explicit.
        num_proc_request = map_request(self.args)
        self.train_rows = tokenize_dataset(train_dataset, encode, num_proc_request)
        if len(self.train_rows) == 0:
            raise ValueError("the training dataset has no rows")
        self.eval_rows: Optional[TokenizedRows] = (
            None if eval_dataset is None else tokenize_dataset(eval_dataset, encode, num_proc_request)
        )
        if self.eval_rows and self.args.eval_strategy == "no" and getattr(self.args, "eval_strategy_unset", False):
            self.args.eval_strategy = "steps"
            _note_eval_by_steps(self.args.eval_steps)
        if self.args.eval_strategy != "no" and not self.eval_rows:
            raise ValueError(f"eval_strategy={self.args.eval_strategy!r} needs an eval_dataset with rows")
        pad_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad_id if pad_id is not None else getattr(tokenizer, "eos_token_id", None) or 0)
        self.optimizer: Any = None
        self.state = self._rank_state(TrainerState())
        self.control = TrainerControl()
        self.callback_handler = CallbackHandler([FlowCallback, *(callbacks or [])], model, tokenizer)
        self.control = self._fire("on_init_end")

    # ---- ranks ----

    @property
    def global_train_batch_size(self) -> int:
        """Rows per micro-batch over all ranks: each rank trains `per_device_train_batch_size` of them."""
        return self.args.per_device_train_batch_size * self.world.size

    def _rank_state(self, state: TrainerState) -> TrainerState:
        state.is_world_process_zero = self.world.is_main
        state.is_local_process_zero = self.world.local_rank == 0
        return state

    def is_world_process_zero(self) -> bool:
        return self.world.is_main

    def is_local_process_zero(self) -> bool:
        return self.world.local_rank == 0

    # ---- callbacks ----

    def add_callback(self, callback: Any) -> None:
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback: Any) -> Any:
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callback_handler.remove_callback(callback)

    def _fire(self, event: str, **kwargs: Any) -> TrainerControl:
        self.control = self.callback_handler.fire(event, self.args, self.state, self.control, **kwargs)
        return self.control

    # ---- setup ----

    def _use_compile(self) -> bool:
        if self.args.mx_compile is not None:
            return bool(self.args.mx_compile)
        # Compilation pays off on the GPU; on CPU it mostly adds tracing time for small models.
        return mx.default_device().type == mx.DeviceType.gpu

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

    def _build_step_functions(self) -> None:
        model, optimizer = self.model, self.optimizer
        # Settled once here, outside any compiled trace: whether the loss may take the logits chunk by chunk.
        output_head(model)
        loss_and_grad = nn.value_and_grad(model, masked_cross_entropy)

        def forward_backward(tokens: mx.array, lengths: mx.array) -> Any:
            (loss, count), grads = loss_and_grad(model, tokens, lengths)
            return loss, count, grads

        def apply_update(grads: Any) -> mx.array:
            optimizer.update(model, grads)
            return optimizer.step

        if self._use_compile():
            captured = [model.state, optimizer.state, mx.random.state]
            forward_backward = mx.compile(forward_backward, inputs=captured, outputs=captured)
            apply_update = mx.compile(apply_update, inputs=captured, outputs=captured)
        self._forward_backward = forward_backward
        self._apply_update = apply_update

    def _resolve_checkpoint(self, resume_from_checkpoint: Any) -> Optional[Path]:
        if resume_from_checkpoint in (None, False):
            return None
        if resume_from_checkpoint is True:
            found = sorted_checkpoints(Path(self.args.output_dir))
            if not found:
                raise FileNotFoundError(f"no checkpoint to resume from in {self.args.output_dir}")
            return found[-1]
        return Path(resume_from_checkpoint)

    # ---- training ----

    def gradient_checkpointing(self) -> Any:
        """A `with` span in which the model's blocks recompute their activations, when the model or args ask."""
        requested = wants_gradient_checkpointing(self.model, getattr(self.args, "gradient_checkpointing", False))
        return gradient_checkpointing(self.model, requested)

    def train(self, resume_from_checkpoint: Any = None) -> TrainOutput:
        with self.gradient_checkpointing():
            return self._train(resume_from_checkpoint)

    def _train(self, resume_from_checkpoint: Any) -> TrainOutput:
        args = self.args
        plan = plan_training(len(self.train_rows), args, self.world.size)
        self._create_optimizer(plan.max_steps)
        self.state = self._rank_state(TrainerState(train_batch_size=args.per_device_train_batch_size))
        checkpoint = self._resolve_checkpoint(resume_from_checkpoint)
        if checkpoint is not None:
            check_world_size(checkpoint, self.world.size)
            self.state = self._rank_state(load_checkpoint(checkpoint, self.model, self.optimizer))
        self.state.compute_steps(args, plan.max_steps)
        self.state.max_steps, self.state.num_train_epochs = plan.max_steps, plan.num_epochs
        self.state.train_batch_size = args.per_device_train_batch_size
        self.state.stateful_callbacks = {}
        self._build_step_functions()
        # Compiled steps retrace for every new batch shape, so lengths are rounded to a few buckets then.
        self._pad_multiple = args.pad_to_multiple_of or (32 if self._use_compile() else None)
        self.model.train()
        if self.state.global_step < plan.max_steps:
            check_memory_fits(self)

        epochs_done, steps_done_in_epoch = divmod(self.state.global_step, plan.steps_per_epoch)
        self._initial_step = self.state.global_step
        self._last_logged_step = self.state.global_step
        self._initial_tokens = self.state.num_input_tokens_seen
        self._running_loss = mx.array(0.0)
        self._total_loss = 0.0
        self._samples_seen = 0
        start = time.time()

        self._fire("on_train_begin")
        if self.state.global_step < plan.max_steps:
            for epoch in range(epochs_done, plan.num_epochs):
                self._fire("on_epoch_begin")
                first_step = steps_done_in_epoch if epoch == epochs_done else 0
                self._run_epoch(epoch, first_step, plan)
                if self.control.should_training_stop:
                    break
        return self._finish_training(start)

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        """The row indices of each micro-batch this epoch, in `args.dataset_order`; a subclass may order them."""
        args = self.args
        return epoch_batches(
            self.train_rows.lengths, self.global_train_batch_size, args.dataset_order, args.seed, epoch
        )

    def _run_epoch(self, epoch: int, first_step: int, plan: TrainingPlan) -> None:
        args = self.args
        batches = self._epoch_batches(epoch)
        self.callback_handler.train_dataloader = batches
        accumulation = args.gradient_accumulation_steps
        grad_norm, learning_rate = None, None
        for step_in_epoch in range(first_step, plan.steps_per_epoch):
            # The epoch's last step takes whatever micro-batches remain, even fewer than the accumulation count.
            group = batches[step_in_epoch * accumulation : (step_in_epoch + 1) * accumulation]
            if self.world.is_distributed:
                grads, step_loss = self._distributed_gradients(group)
            else:
                grads, step_loss = self._gradients(group)
            grads, grad_norm = clip_gradients(grads, args.grad_clip_mode, args.max_grad_norm, args.max_grad_value)
            self._fire("on_pre_optimizer_step")
            learning_rate = self._rates[min(self.state.global_step, len(self._rates) - 1)]
            self._running_loss = self._running_loss + step_loss
            # One evaluation covers clipping and the update.
            mx.eval(
                self._apply_update(grads), grad_norm, self._running_loss, self.model.parameters(), self.optimizer.state
            )
            del grads  # else this step's gradients stay alive through the next step's backward pass
            self._fire("on_optimizer_step")
            self.state.global_step += 1
            self.state.epoch = epoch + (step_in_epoch * accumulation + len(group)) / plan.batches_per_epoch
            self._fire("on_step_end")
            self._log_evaluate_save(grad_norm, learning_rate)
            if self.control.should_epoch_stop or self.control.should_training_stop:
                break
        self._fire("on_epoch_end")
        self._log_evaluate_save(grad_norm, learning_rate)

    def _gradients(self, group: List[np.ndarray]) -> Tuple[Any, mx.array]:
        """One process's step: the mean loss and its gradients over the micro-batches of `group`."""
        args = self.args
        self._fire("on_step_begin")
        # Randomness (dropout) is a function of the step, so a resumed run draws what the uninterrupted one did.
        mx.random.seed(args.seed + self.state.global_step)
        grads, step_loss, step_targets = None, None, mx.array(0)
        for position, indices in enumerate(group):
            tokens, lengths = pad_batch(self.train_rows, indices, self.pad_id, self._pad_multiple)
            loss, count, micro_grads = self._forward_backward(mx.array(tokens), mx.array(lengths))
            if len(group) > 1:
                # A micro-batch's mean times its target count is its summed loss (and that sum's gradient).
                loss, micro_grads = weighted_by_count(loss, micro_grads, count)
                step_targets = step_targets + count
            grads = micro_grads if grads is None else tree_map(mx.add, grads, micro_grads)
            step_loss = loss if step_loss is None else step_loss + loss
            self.state.num_input_tokens_seen += int(lengths.sum())
            self._samples_seen += len(indices)
            # Materialised before the next micro-batch, and before clipping: evaluated in one graph with the norm
            # over every gradient, mlx evaluates the step in an order that holds nearly every block's activations,
            # and the peak with checkpointing was 2.3x mlx-lm's; leaf by leaf, in backward order, it holds least.
            evaluate_gradients(grads, step_loss, step_targets)
            if position < len(group) - 1:
                self._fire("on_substep_end")
        if len(group) > 1:
            # The step's token-weighted mean, as Hugging Face's Trainer gets it by dividing by num_items_in_batch.
            step_loss, grads = per_target(step_loss, grads, step_targets)
        return grads, step_loss

    def _distributed_gradients(self, group: List[np.ndarray]) -> Tuple[Any, mx.array]:
        """This rank's strided share of each micro-batch, summed with the other ranks' into the global step.

        Losses and gradients are token-weighted before the sum and divided by the global target count after it,
        so the step is the one a single process takes on the whole global batch.
        """
        args, world = self.args, self.world
        what = f"step {self.state.global_step + 1}"
        failure: Optional[BaseException] = None
        grads, step_loss, step_targets = None, mx.array(0.0), mx.array(0)
        tokens_seen = samples = 0
        try:
            self._fire("on_step_begin")
            mx.random.seed(args.seed + self.state.global_step)
            for position, indices in enumerate(group):
                local = shard(indices, world.rank, world.size)
                # A rank left without rows in a tail batch still runs a step, on a row with no targets.
                tokens, lengths = pad_batch(
                    self.train_rows, local if len(local) else indices[:1], self.pad_id, self._pad_multiple
                )
                if not len(local):
                    lengths = np.ones_like(lengths)
                loss, count, micro_grads = self._forward_backward(mx.array(tokens), mx.array(lengths))
                loss, micro_grads = weighted_by_count(loss, micro_grads, count)
                grads = micro_grads if grads is None else tree_map(mx.add, grads, micro_grads)
                step_loss, step_targets = step_loss + loss, step_targets + count
                if len(local):
                    tokens_seen += int(lengths.sum())
                    samples += len(local)
                evaluate_gradients(grads, step_loss, step_targets)
                if position < len(group) - 1:
                    self._fire("on_substep_end")
        except Exception as error:
            failure = error
        counts = [0 if failure is not None else int(step_targets.item()), tokens_seen, samples]
        totals = world.exchange_status(what, failure, counts)
        if failure is not None:
            if hasattr(failure, "add_note"):
                failure.add_note(f"raised on rank {world.rank} during {what}; the other ranks were told and stop too")
            raise failure
        self.state.num_input_tokens_seen += int(totals[1])
        self._samples_seen += int(totals[2])
        grads, (loss_sum,) = world.sum_tree(f"{what}: summing gradients", grads, [step_loss])
        step_loss, grads = per_target(loss_sum, grads, mx.array(int(totals[0])))
        return grads, step_loss

    def _log_evaluate_save(self, grad_norm: Any, learning_rate: Optional[float]) -> None:
        self.world.agree_flags(self.control)
        if self.control.should_log and self.state.global_step > self._last_logged_step:
            summed = self._running_loss.item()
            self._running_loss = mx.array(0.0)
            logs = {"loss": summed / (self.state.global_step - self._last_logged_step)}
            if grad_norm is not None:
                logs["grad_norm"] = float(grad_norm.item())
            if learning_rate is not None:
                logs["learning_rate"] = learning_rate
            self._total_loss += summed
            self._last_logged_step = self.state.global_step
            self.log(logs)
        if self.control.should_evaluate:
            if self.eval_rows:
                self._track_best(self.evaluate())
            else:
                self.control.should_evaluate = False
        if self.control.should_save:
            self._save_checkpoint()
            self._fire("on_save")

    def _finish_training(self, start: float) -> TrainOutput:
        runtime = time.time() - start
        self._total_loss += self._running_loss.item()
        steps = self.state.global_step - self._initial_step
        training_loss = self._total_loss / max(steps, 0.001)
        tokens = self.state.num_input_tokens_seen - self._initial_tokens
        metrics = {"train_runtime": round(runtime, 4)}
        if runtime > 0:
            metrics["train_samples_per_second"] = round(self._samples_seen / runtime, 3)
            metrics["train_steps_per_second"] = round(steps / runtime, 3)
            metrics["train_tokens_per_second"] = round(tokens / runtime, 3)
        metrics["train_loss"] = training_loss
        self.log(metrics)
        if self.args.load_best_model_at_end and self.state.best_model_checkpoint is not None:
            # Rank 0 wrote it; every rank loads it where its host can see the folder (one host, or a shared disk).
            self.world.barrier("waiting for rank 0's checkpoints before loading the best")
            best = Path(self.state.best_model_checkpoint)
            if best.is_dir() or self.world.is_main:
                load_best_weights(best, self.model)
            else:
                logger.warning("rank %d cannot see %s, so it keeps its last weights", self.world.rank, best)
        if self.world.is_main:
            with self.world.alone():
                save_model_files(Path(self.args.output_dir), self.model, self.tokenizer)
        self._fire("on_train_end")
        return TrainOutput(self.state.global_step, training_loss, metrics)

    # ---- logging, evaluation, checkpoints ----

    def log(self, logs: dict) -> None:
        """Record `logs` (with the epoch added) in the log history and hand them to `on_log`."""
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self._fire("on_log", logs=logs)

    def evaluate(self) -> dict:
        """Eval loss as Hugging Face's `Trainer` reports it (batch token means, weighted by rows) and its perplexity."""
        if not self.eval_rows:
            raise ValueError("evaluation needs an eval_dataset")
        world = self.world
        size = self.args.per_device_eval_batch_size * world.size
        batches = epoch_batches(self.eval_rows.lengths, size, "sequential", 0, 0)
        self.callback_handler.eval_dataloader = batches
        self.model.eval()
        start = time.time()
        row_losses = []
        for global_indices in batches:
            # Each rank evaluates its strided share; the row losses are summed over the ranks below.
            indices = shard(global_indices, world.rank, world.size)
            if not len(indices):
                continue
            tokens, lengths = pad_batch(self.eval_rows, indices, self.pad_id, self.args.pad_to_multiple_of)
            loss, _ = masked_cross_entropy(self.model, mx.array(tokens), mx.array(lengths), differentiable=False)
            # Each row is credited with its batch's token mean, as the Trainer repeats a batch's loss per row.
            row_losses += [loss.item()] * len(indices)
            self._fire("on_prediction_step")
        self.model.train()
        runtime = time.time() - start
        eval_sum, eval_rows = math.fsum(row_losses), len(row_losses)
        if world.is_distributed:
            (summed,) = world.collective(
                f"evaluation at step {self.state.global_step}", [mx.array([eval_sum, eval_rows], dtype=mx.float32)]
            )
            eval_sum, eval_rows = float(summed[0]), int(summed[1])
        eval_loss = eval_sum / eval_rows
        metrics = {
            "eval_loss": eval_loss,
            "eval_perplexity": math.exp(min(eval_loss, 700.0)),
            "eval_runtime": round(runtime, 4),
        }
        if runtime > 0:
            metrics["eval_samples_per_second"] = round(len(self.eval_rows) / runtime, 3)
            metrics["eval_steps_per_second"] = round(len(batches) / runtime, 3)
        self.log(metrics)
        self._fire("on_evaluate", metrics=metrics)
        return metrics

    def _track_best(self, metrics: dict) -> None:
        """Update `best_metric` / `best_global_step` as Hugging Face does after each evaluation."""
        name = self.args.metric_for_best_model
        if name is None:
            return
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            raise KeyError(f"metric_for_best_model={name!r} is not among the eval metrics {sorted(metrics)}")
        value, best = metrics[key], self.state.best_metric
        improved = best is None or (value > best if self.args.greater_is_better else value < best)
        if improved:
            self.state.best_metric = value
            if self.args.save_strategy != "no":
                self.state.best_global_step = self.state.global_step

    def _save_checkpoint(self) -> None:
        output_dir = Path(self.args.output_dir)
        if self.state.best_global_step:
            best = output_dir / f"checkpoint-{self.state.best_global_step}"
            # Rank 0's disk decides, so every rank records the same best checkpoint.
            found = self.world.is_main and best.is_dir()
            if self.world.is_distributed:
                (summed,) = self.world.collective("agreeing on the best checkpoint", [mx.array([int(found)])])
                found = bool(summed[0])
            if self.state.best_global_step == self.state.global_step or found:
                self.state.best_model_checkpoint = str(best)
        for callback in [*self.callback_handler.callbacks, self.control]:
            if _exportable(callback):
                self.state.stateful_callbacks[type(callback).__name__] = callback.state()
        if not self.world.is_main:
            return
        with self.world.alone():
            save_checkpoint(
                output_dir,
                self.model,
                self.optimizer,
                self.state,
                self.args,
                self.args.save_only_model,
                extra_files={WORLD_FILE: world_file_text(self.world.size)},
            )
        rotate_checkpoints(output_dir, self.args.save_total_limit, self.state.best_model_checkpoint)

    def save_model(self, output_dir: Optional[str] = None) -> None:
        """Write the model files; under `mlx.launch` only rank 0 writes, as the Hugging Face `Trainer` does."""
        if self.world.is_main:
            with self.world.alone():
                save_model_files(Path(output_dir or self.args.output_dir), self.model, self.tokenizer)
