# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`GRPOTrainer` on MLX: TRL's GRPO on the zoo's shared training loop (`MLXTrainer`).

A generation batch (`generation_batch_size / num_generations` prompts, `num_generations` completions each) is
sampled, scored and shuffled once, cut into `steps_per_generation` micro-batches and trained on `num_iterations`
times, as TRL does; the loop, callbacks, schedules, clipping, checkpoints, resuming and evaluation are SFT's. The
KL reference (`beta > 0`) is the model with its LoRA adapters off. Logs carry TRL's metric names.

Under `mlx.launch` each rank samples and scores its share of `generation_batch_size / num_generations` prompts
(whole groups), the rewards are gathered for the advantages as TRL gathers them, and the shared loop's ranks average the
gradients, so a step is the one TRL's processes take together. An evaluation shares its batches out over the ranks
and logs the means over all of them, as TRL's processes gather their eval metrics.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from unsloth_zoo.mlx.data import TokenizedRows
from unsloth_zoo.mlx.distributed import current_world, shard
from unsloth_zoo.mlx.optim import clip_gradients
from unsloth_zoo.mlx.trainer import MLXTrainer

from ...models.batched_sampling import eos_token_ids
from ...training.trainer import _progress_callbacks
from ..config import method_arguments
from ..grpo_config import GRPOConfig
from ..reference import ReferencePolicy
from .eval_ranks import chunk_means
from .loss import LossSettings, build_batch, completion_logps, loss_metrics, policy_loss
from .rollout import Rollout, RolloutMaker, dataset_rows, is_conversation
from .vision import VisionRolloutMaker, is_vision_model

__all__ = ["GRPOTrainer", "is_conversation"]


def _reward_name(function: Any, index: int) -> str:
    return getattr(function, "__name__", None) or f"reward_{index}"


class SlotRows(TokenizedRows):
    """The loop's rows: one per completion slot of an epoch, each as long as its prompt plus the longest completion,
    so the shared loop counts steps and sizes its memory check as GRPO will use them."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self.rows = [np.array([index], dtype=np.int32) for index in range(len(lengths))]
        self.lengths = np.asarray(lengths, dtype=np.int64)


class GRPOTrainer(MLXTrainer):
    """TRL's `GRPOTrainer(model, reward_funcs, args, train_dataset, processing_class)` on an mlx_lm model."""

    args: Any  # a GRPOConfig: the shared loop's arguments with GRPO's keywords

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
        config = method_arguments(GRPOConfig, args)
        tokenizer = processing_class if processing_class is not None else tokenizer
        if tokenizer is None:
            raise ValueError("GRPOTrainer needs processing_class (the model's tokenizer)")
        functions = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        for index, function in enumerate(functions):
            if not callable(function) or isinstance(function, str):
                raise NotImplementedError(
                    f"reward_funcs[{index}]={function!r}: only Python reward functions run on MLX, not reward models"
                )
        if not functions:
            raise ValueError("reward_funcs is empty: give at least one reward function")
        weights = config.reward_weights
        if weights is not None and len(weights) != len(functions):
            raise ValueError(f"reward_weights has {len(weights)} values for {len(functions)} reward functions")
        self.reward_funcs = functions
        self.reward_func_names = [_reward_name(function, index) for index, function in enumerate(functions)]
        self.reward_weights = [1.0] * len(functions) if weights is None else [float(value) for value in weights]
        self.rows = dataset_rows(train_dataset)
        self.eval_prompt_rows = None if eval_dataset is None else dataset_rows(eval_dataset, "eval_dataset")
        self.is_vision = is_vision_model(model)
        maker = VisionRolloutMaker if self.is_vision else RolloutMaker
        self.rollouts = maker(tokenizer, config, self.reward_funcs, self.reward_func_names, self.reward_weights)
        # A vision model's processor renders and encodes the prompts; the loop keeps its text tokenizer.
        text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer) if self.is_vision else tokenizer
        if self.eval_prompt_rows is not None and config.per_device_eval_batch_size % config.num_generations:
            raise ValueError(
                f"per_device_eval_batch_size={config.per_device_eval_batch_size} must divide by "
                f"num_generations={config.num_generations}: each evaluation batch holds whole groups"
            )
        eval_rows = None if self.eval_prompt_rows is None else SlotRows([1] * len(self.eval_prompt_rows))
        super().__init__(
            model,
            text_tokenizer,
            self._slot_rows(config),
            eval_rows,
            args=config,
            callbacks=[*_progress_callbacks(config), *(callbacks or [])],
        )
        self.rollouts.args = self.args
        if self.world.is_distributed:
            self.rollouts.gather_rewards = self._gather_rewards
        self.processing_class = processing_class if processing_class is not None else tokenizer
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.tokenizer = tokenizer
        pad = getattr(text_tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else (eos_token_ids(text_tokenizer) or [0])[0])
        self.num_generations = self.args.num_generations
        self.reference = ReferencePolicy(model) if self.args.beta != 0.0 else None
        self._rollout: Optional[Rollout] = None
        self._logged: Dict[str, List[float]] = defaultdict(list)
        self._global_tokens = 0.0

    # ---- what the rollout needs, under the names the notebooks and tests call ----

    def prompt_text(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> str:
        return self.rollouts.prompt_text(prompt, row)

    def prompt_ids(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> List[int]:
        return self.rollouts.prompt_ids(prompt, row)

    def score(self, rows: List[Dict[str, Any]], completions: List[Any], completion_ids: List[List[int]]) -> np.ndarray:
        return self.rollouts.score(rows, completions, completion_ids, self.state)

    # ---- the plan: micro-batches as (epoch, generation, slice) addresses ----

    def _prompts_per_generation(self, config: Any = None) -> int:
        config = config or self.args
        return config.generation_batch_size // (config.num_generations * current_world().size)

    def _slot_rows(self, config: Any) -> SlotRows:
        """As many slots per epoch as its micro-batches hold completions, so the loop plans TRL's step count."""
        ranks = current_world().size
        generations = max(math.ceil(len(self.rows) / (self._prompts_per_generation(config) * ranks)), 1)
        micro = generations * config.steps_per_generation * config.num_iterations
        prompt_lengths = [len(self.rollouts.encode(row)[0]) for row in self.rows]
        longest = max(prompt_lengths) + int(config.max_completion_length)
        return SlotRows([longest] * (micro * config.per_device_train_batch_size * ranks))

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        args = self.args
        per_generation = args.steps_per_generation * args.num_iterations
        generations = len(self.train_rows) // (per_generation * self.global_train_batch_size)
        return [
            np.array([epoch, generation, micro % args.steps_per_generation])
            for generation in range(generations)
            for micro in range(per_generation)
        ]

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.args.shuffle_dataset:
            return np.arange(len(self.rows))
        return np.random.default_rng(self.args.seed + epoch).permutation(len(self.rows))

    def _prompt_rows(self, epoch: int, generation: int) -> List[Dict[str, Any]]:
        order = self._epoch_order(epoch)
        count = self._prompts_per_generation()
        # Each rank takes its own consecutive share of the ranks' generation batch, as TRL's processes do.
        start = (generation * self.world.size + self.world.rank) * count
        return [self.rows[int(order[(start + offset) % len(order)])] for offset in range(count)]

    # ---- one generation batch ----

    def _generate(self, epoch: int, generation: int) -> Rollout:
        """Sample and score the batch, shuffle it once (TRL's order for its micro-batches) and, when the policy
        will have moved before its last pass, keep the sampling policy's log-probabilities."""
        args = self.args
        rollout = self.rollouts.rollout(self.model, self._prompt_rows(epoch, generation), self.state)
        for name, value in rollout.metrics.items():
            self._logged[name].append(value)
        # dapo's normalizer counts every rank's completion tokens (TRL gathers num_items_in_batch).
        tokens, seen = self.world.collective(
            f"step {self.state.global_step + 1}: counting the generation batch's tokens",
            [mx.array([rollout.tokens, rollout.metrics["num_tokens"]], dtype=mx.float32)],
        )[0]
        self.state.num_input_tokens_seen += int(seen)
        self._global_tokens = float(tokens)
        order = np.random.default_rng([args.seed, epoch, generation]).permutation(len(rollout.completion_ids))
        rollout = rollout.reordered(order)
        rollout.key = (epoch, generation)
        if args.num_iterations > 1 or args.steps_per_generation > args.gradient_accumulation_steps:
            rollout.old_logps = self._sampling_logps(rollout)
        return rollout

    def _sampling_logps(self, rollout: Rollout) -> List[np.ndarray]:
        size, temperature = self.args.per_device_train_batch_size, float(self.args.temperature)
        found: List[np.ndarray] = []
        for start in range(0, len(rollout.completion_ids), size):
            part = rollout.rows(slice(start, start + size))
            batch = build_batch(
                part.prompt_ids, part.completion_ids, part.masks, part.advantages, self.pad_id, features=part.features
            )
            values = np.array(completion_logps(self.model, batch, temperature, differentiable=False))
            found += [values[row, : len(ids)] for row, ids in enumerate(part.completion_ids)]
        return found

    # ---- the step ----

    def _build_step_functions(self) -> None:
        super()._build_step_functions()
        settings = self.loss_settings()
        self._loss_and_grad = nn.value_and_grad(
            self.model, lambda model, batch, normalizer: policy_loss(model, batch, settings, normalizer)
        )

    def _gradients(self, group: List[np.ndarray]) -> Tuple[Any, mx.array]:
        args = self.args
        self._fire("on_step_begin")
        # Sampling and dropout follow the step, so a resumed run draws what the uninterrupted one did.
        mx.random.seed(args.seed + self.state.global_step)
        epoch, generation = int(group[0][0]), int(group[0][1])
        if self._rollout is None or self._rollout.key != (epoch, generation):
            self._rollout = self._generate(epoch, generation)
        rollout, size = self._rollout, args.per_device_train_batch_size
        parts = [rollout.rows(slice(int(address[2]) * size, (int(address[2]) + 1) * size)) for address in group]
        # dapo divides by the generation batch's tokens (all ranks') shared out over its micro-batches and ranks,
        # as TRL does; the ranks' gradients are then averaged.
        share = self._global_tokens * args.gradient_accumulation_steps / args.steps_per_generation / self.world.size
        normalizer = share if args.loss_type == "dapo" else float(args.gradient_accumulation_steps)
        grads, loss, metrics = self.accumulate(parts, normalizer)
        for name, value in metrics.items():
            self._logged[name].append(value)
        self._samples_seen += sum(len(part.completion_ids) for part in parts) * self.world.size
        return grads, loss

    def _distributed_gradients(self, group: List[np.ndarray]) -> Tuple[Any, mx.array]:
        """This rank's step on its own groups, averaged with the other ranks' (DDP's mean of the gradients)."""
        world, what = self.world, f"step {self.state.global_step + 1}"
        failure: Optional[BaseException] = None
        grads, loss = None, mx.array(0.0)
        try:
            grads, loss = self._gradients(group)
        except Exception as error:
            failure = error
        world.exchange_status(what, failure, [0])
        if failure is not None:
            raise failure
        grads, (loss_sum,) = world.sum_tree(f"{what}: summing gradients", grads, [loss])
        size = float(world.size)
        return tree_map(lambda array: (array / size).astype(array.dtype), grads), loss_sum / size

    def _gather_rewards(self, rewards: np.ndarray) -> Tuple[np.ndarray, slice]:
        """Every rank's rewards in rank order (each rank holds as many completions) and this rank's rows."""
        world, count = self.world, len(rewards)
        table = np.zeros((world.size, *rewards.shape), dtype=np.float32)
        table[world.rank] = rewards
        (summed,) = world.collective(f"step {self.state.global_step + 1}: gathering rewards", [mx.array(table)])
        return summed.reshape(-1, rewards.shape[1]), slice(world.rank * count, (world.rank + 1) * count)

    def accumulate(self, parts: List[Rollout], normalizer: float) -> Tuple[Any, mx.array, Dict[str, float]]:
        """The summed gradients and loss of these micro-batches, and TRL's loss metrics averaged over them."""
        settings = self.loss_settings()
        if not hasattr(self, "_loss_and_grad"):
            self._build_step_functions()
        grads, total, collected = None, mx.array(0.0), []
        for position, part in enumerate(parts):
            batch = build_batch(
                part.prompt_ids,
                part.completion_ids,
                part.masks,
                part.advantages,
                self.pad_id,
                part.old_logps,
                part.features,
            )
            if self.reference is not None:
                batch.ref_logps = self.reference.run(
                    lambda model: completion_logps(model, batch, settings.temperature, differentiable=False)  # noqa: B023
                )
            (loss, pieces), micro = self._loss_and_grad(self.model, batch, mx.array(normalizer))
            grads = micro if grads is None else tree_map(mx.add, grads, micro)
            total = total + loss
            mx.eval(total, grads)
            collected.append(loss_metrics(pieces, batch, settings))
            if position < len(parts) - 1:
                self._fire("on_substep_end")
        metrics = {name: float(np.mean([values[name] for values in collected])) for name in collected[0]}
        return grads, total, metrics

    def _train_on(
        self,
        prompt_ids: List[List[int]],
        completion_ids: List[List[int]],
        masks: List[List[int]],
        advantages: np.ndarray,
        metrics: Dict[str, float],
        old_logps: Optional[List[np.ndarray]] = None,
    ) -> float:
        """One optimizer step on these completions, as one generation batch of the configured micro-batches."""
        args = self.args
        rollout = Rollout(prompt_ids, completion_ids, masks, np.asarray(advantages), {}, old_logps)
        size = args.per_device_train_batch_size
        parts = [rollout.rows(slice(start, start + size)) for start in range(0, len(prompt_ids), size)]
        normalizer = rollout.tokens if args.loss_type == "dapo" else float(args.gradient_accumulation_steps)
        grads, loss, step_metrics = self.accumulate(parts, normalizer)
        grads, grad_norm = clip_gradients(grads, args.grad_clip_mode, args.max_grad_norm, args.max_grad_value)
        self.optimizer.update(self.model, grads)
        mx.eval(self.model.parameters(), self.optimizer.state, grad_norm)
        metrics.update(step_metrics, grad_norm=float(grad_norm.item()))
        return float(loss.item())

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

    # ---- logs and evaluation ----

    def log(self, logs: dict) -> None:
        """A training log also carries TRL's metrics, each averaged over the values since the last log."""
        if "loss" in logs and "train_loss" not in logs:
            names = sorted(name for name, values in self._logged.items() if name != "num_tokens" and values)
            means = [float(np.mean(self._logged[name])) for name in names]
            if self.world.is_distributed and names:
                # TRL logs metrics gathered over the processes: here each is the mean of the ranks' means.
                (summed,) = self.world.collective("averaging the logged metrics", [mx.array(means, dtype=mx.float32)])
                means = [float(value) / self.world.size for value in summed]
            logs.update(zip(names, means))
            logs["num_tokens"] = float(self.state.num_input_tokens_seen)
            self._logged = defaultdict(list)
        super().log(logs)

    def evaluate(self) -> dict:
        """TRL's evaluation: completions sampled for each eval prompt, scored, and the loss and metrics of each
        batch (no accumulation), logged under `eval_` as means over the batches. Under `mlx.launch` each rank takes
        a strided share of the batches, and the means are over every rank's batches."""
        if not self.eval_prompt_rows:
            raise ValueError("evaluation needs an eval_dataset")
        args, world = self.args, self.world
        settings = self.loss_settings()
        count = args.per_device_eval_batch_size // self.num_generations
        chunks = [self.eval_prompt_rows[start : start + count] for start in range(0, len(self.eval_prompt_rows), count)]
        own = [chunks[int(index)] for index in shard(range(len(chunks)), world.rank, world.size)]
        self.callback_handler.eval_dataloader = own
        # Each batch's advantages are its own groups', as in one process; gathering them would pair unequal shares.
        gather_rewards, self.rollouts.gather_rewards = self.rollouts.gather_rewards, None
        self.model.eval()
        start = time.time()
        stored: Dict[str, List[float]] = defaultdict(list)
        failure: Optional[BaseException] = None
        try:
            for rows in own:
                rollout = self.rollouts.rollout(self.model, rows, self.state)
                batch = build_batch(
                    rollout.prompt_ids,
                    rollout.completion_ids,
                    rollout.masks,
                    rollout.advantages,
                    self.pad_id,
                    features=rollout.features,
                )
                if self.reference is not None:
                    batch.ref_logps = self.reference.run(
                        lambda model: completion_logps(model, batch, settings.temperature, differentiable=False)  # noqa: B023
                    )
                normalizer = mx.array(rollout.tokens if settings.loss_type == "dapo" else 1.0)
                loss, pieces = policy_loss(self.model, batch, settings, normalizer)
                stored["loss"].append(float(loss.item()))
                for name, value in {**rollout.metrics, **loss_metrics(pieces, batch, settings)}.items():
                    if name != "num_tokens":
                        stored[name].append(value)
                self._fire("on_prediction_step")
        except Exception as error:
            if not world.is_distributed:
                raise
            failure = error
        finally:
            self.model.train()
            self.rollouts.gather_rewards = gather_rewards
        # Rank 0 evaluates the most batches, so its clock is the evaluation's.
        stored["runtime"] = [time.time() - start] if world.is_main else []
        means = chunk_means(world, f"evaluation at step {self.state.global_step}", stored, failure)
        runtime = means.pop("runtime")
        metrics = {f"eval_{name}": value for name, value in means.items()}
        metrics["eval_runtime"] = round(runtime, 4)
        if runtime > 0:
            metrics["eval_samples_per_second"] = round(len(self.eval_prompt_rows) / runtime, 3)
            metrics["eval_steps_per_second"] = round(len(chunks) / runtime, 3)
        self.log(metrics)
        self._fire("on_evaluate", metrics=metrics)
        return metrics
