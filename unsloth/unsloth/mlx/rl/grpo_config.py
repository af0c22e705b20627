# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`GRPOConfig` on MLX: TRL's GRPO keywords and defaults on top of the shared training arguments.

The published GRPO notebooks pass trl 0.22's keywords (`max_prompt_length`, `vllm_sampling_params`, `warmup_ratio`);
each is kept. TRL's batch rule holds: the completions of one generation batch (`per_device_train_batch_size` times
`steps_per_generation`, by default the accumulation steps) split into whole groups of `num_generations`. A batch
size of 1 that does not is raised to `num_generations`, as CUDA Unsloth does for the notebooks; any other is refused.
Each generation batch is trained on `num_iterations` times; its micro-batches must fill whole optimizer steps.
`generation_batch_size` counts every rank's completions, as TRL's does; under `mlx.launch` each rank holds whole groups.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Tuple

from unsloth_zoo.mlx.distributed import current_world

from .config import RLTrainingArguments

logger = logging.getLogger(__name__)

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
SCALE_REWARDS = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}


class GRPOConfig(RLTrainingArguments):
    """TRL's `GRPOConfig` keywords, with TRL's defaults, on the MLX training arguments."""

    METHOD_KEYWORDS: Dict[str, Any] = {
        "num_generations": 8,
        "max_prompt_length": 512,
        "max_completion_length": 256,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": None,
        "min_p": None,
        "repetition_penalty": 1.0,
        "beta": 0.0,
        "epsilon": 0.2,
        "epsilon_high": None,
        "delta": None,
        "loss_type": "dapo",
        "importance_sampling_level": "token",
        # TRL 1.x multiplies the KL by the importance ratio; the notebooks' TRL 0.22 does not, so neither do we unless asked.
        "use_bias_correction_kl": False,
        "scale_rewards": "group",
        "reward_weights": None,
        "mask_truncated_completions": False,
        "steps_per_generation": None,
        "num_iterations": 1,
        "generation_batch_size": None,
        "vllm_sampling_params": None,
        "generation_kwargs": None,
        "chat_template_kwargs": None,
        "log_completions": False,
        "num_completions_to_print": None,
        "shuffle_dataset": True,
        "remove_unused_columns": False,
        "disable_dropout": False,
        "model_init_kwargs": None,
        # vLLM's settings: generation runs on mlx_lm's batch here, so they steer nothing.
        "use_vllm": False,
        "vllm_mode": "server",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_tensor_parallel_size": 1,
        "vllm_enable_sleep_mode": False,
        "vllm_importance_sampling_correction": True,
        "ds3_gather_for_generation": True,
        "unsloth_num_chunks": -1,
    }
    ACCEPTED_AT_DEFAULT: Dict[str, Tuple[Any, ...]] = {
        "multi_objective_aggregation": ("sum_then_normalize",),
        "top_entropy_quantile": (1.0, 1),
        "sync_ref_model": (False,),
        "use_liger_kernel": (False,),
        "use_liger_loss": (None, False),
    }

    def check_method_keywords(self) -> None:
        generations = self.num_generations
        if isinstance(generations, bool) or not isinstance(generations, int) or generations < 2:
            raise ValueError(
                f"num_generations must be an integer of at least 2 (advantages compare completions within a group), "
                f"got {generations!r}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise NotImplementedError(f"loss_type={self.loss_type!r} is not available on MLX; use one of {LOSS_TYPES}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(
                f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, "
                f"got {self.importance_sampling_level!r}"
            )
        if self.importance_sampling_level == "sequence" and self.loss_type != "grpo":
            logger.warning(
                "importance_sampling_level='sequence' with loss_type=%r sums per-token terms, weighting each sequence "
                "by its length; GSPO's own objective is loss_type='grpo'",
                self.loss_type,
            )
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(
                f"scale_rewards must be 'group', 'batch', 'none', True or False, got {self.scale_rewards!r}"
            )
        self.scale_rewards = SCALE_REWARDS[self.scale_rewards]
        for name in ("max_completion_length", "max_prompt_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        self._check_batch()

    def _check_batch(self) -> None:
        if self.generation_batch_size is not None and self.steps_per_generation is not None:
            raise ValueError("give generation_batch_size or steps_per_generation, not both")
        batch, ranks = self.per_device_train_batch_size, current_world().size
        if self.generation_batch_size is not None:
            if self.generation_batch_size % (batch * ranks):
                raise ValueError(
                    f"generation_batch_size={self.generation_batch_size} must be a multiple of "
                    f"per_device_train_batch_size={batch} x {ranks} rank(s)"
                )
            self.steps_per_generation = self.generation_batch_size // (batch * ranks)
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        iterations = self.num_iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"num_iterations must be a positive integer, got {iterations!r}")
        if (steps * iterations) % self.gradient_accumulation_steps:
            raise NotImplementedError(
                f"steps_per_generation={steps} x num_iterations={iterations} micro-batches per generation batch do "
                f"not fill whole optimizer steps of gradient_accumulation_steps={self.gradient_accumulation_steps}: "
                "on MLX an optimizer step never spans two generation batches"
            )
        if (batch * steps) % self.num_generations and batch == 1:
            logger.warning(
                "per_device_train_batch_size=1 holds no whole group of num_generations=%d completions; "
                "using per_device_train_batch_size=%d",
                self.num_generations,
                self.num_generations,
            )
            self.per_device_train_batch_size = batch = self.num_generations
        if (batch * steps) % self.num_generations:
            raise ValueError(
                f"the generation batch (per_device_train_batch_size={batch} x steps_per_generation={steps} = "
                f"{batch * steps} completions per rank) must divide by num_generations={self.num_generations}"
            )
        self.steps_per_generation = steps
        self.generation_batch_size = batch * steps * ranks
