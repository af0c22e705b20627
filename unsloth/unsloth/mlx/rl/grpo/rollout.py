# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""One GRPO generation batch: prompts rendered and tokenized as TRL 0.22 did, `num_generations` completions of
each sampled together on the training model by mlx_lm's batched generation, scored by every reward function and
turned into group-relative advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ...models.batched_sampling import Sampled, Sampling, sample_batch
from .loss import completion_metrics, group_advantages

# Columns the trainer fills itself; every other dataset column reaches the reward functions by name.
OWN_COLUMNS = ("prompt", "completion", "completion_ids")


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) and "role" in item for item in value)


def dataset_rows(dataset: Any, split: str = "train_dataset") -> List[Dict[str, Any]]:
    """The rows as dicts, each checked for a 'prompt' of a string or a conversation."""
    if dataset is None:
        raise ValueError(f"GRPOTrainer needs {split}, with a 'prompt' column")
    rows = [dict(row) for row in dataset]
    if not rows:
        raise ValueError(f"{split} has no rows")
    for index, row in enumerate(rows):
        prompt = row.get("prompt")
        if not isinstance(prompt, str) and not is_conversation(prompt):
            found = "no 'prompt'" if "prompt" not in row else f"a prompt of type {type(prompt).__name__}"
            raise ValueError(
                f"{split} row {index} has {found}: GRPO needs a 'prompt' column of strings or conversations "
                "(lists of {'role', 'content'} messages)"
            )
    return rows


@dataclass
class Rollout:
    """A scored generation batch, its completions in the order the micro-batches take them."""

    prompt_ids: List[List[int]]
    completion_ids: List[List[int]]
    masks: List[List[int]]
    advantages: np.ndarray
    metrics: Dict[str, float]
    old_logps: Optional[List[np.ndarray]] = None
    key: Any = None
    features: Optional[List[Dict[str, Any]]] = None  # a vision prompt's image features, per completion

    @property
    def tokens(self) -> float:
        """Completion tokens that count in the loss, over the whole generation batch (TRL's num_items_in_batch)."""
        return float(sum(sum(mask) for mask in self.masks))

    def reordered(self, order: np.ndarray) -> "Rollout":
        def pick(values: List[Any]) -> List[Any]:
            return [values[int(index)] for index in order]

        old = None if self.old_logps is None else pick(self.old_logps)
        features = None if self.features is None else pick(self.features)
        return Rollout(
            pick(self.prompt_ids),
            pick(self.completion_ids),
            pick(self.masks),
            self.advantages[order],
            self.metrics,
            old,
            self.key,
            features,
        )

    def rows(self, part: slice) -> "Rollout":
        old = None if self.old_logps is None else self.old_logps[part]
        features = None if self.features is None else self.features[part]
        return Rollout(
            self.prompt_ids[part],
            self.completion_ids[part],
            self.masks[part],
            self.advantages[part],
            self.metrics,
            old,
            self.key,
            features,
        )


@dataclass
class RolloutMaker:
    """What a generation batch needs from the trainer: the tokenizer, the sampling settings and the rewards."""

    tokenizer: Any
    args: Any
    reward_funcs: List[Any]
    reward_func_names: List[str]
    reward_weights: List[float]
    # Under mlx.launch: every rank's rewards in rank order and this rank's slice of them (TRL gathers them).
    gather_rewards: Optional[Callable[[np.ndarray], Tuple[np.ndarray, slice]]] = None

    def prompt_text(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> str:
        """The rendered prompt; a string column of `row` that the chat template names (a gpt-oss notebook's
        `reasoning_effort`) is passed to the template, as CUDA Unsloth's GRPO does."""
        if is_conversation(prompt):
            options = dict(self.args.chat_template_kwargs or {})
            template = self.tokenizer.chat_template if isinstance(self.tokenizer.chat_template, str) else ""
            for key, value in (row or {}).items():
                if key not in OWN_COLUMNS and isinstance(value, str) and key in template:
                    options[key] = value
            return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **options)
        return prompt

    def prompt_ids(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> List[int]:
        """The prompt's tokens, as TRL 0.22 made them: no special tokens added, the last `max_prompt_length` kept."""
        ids = list(self.tokenizer(self.prompt_text(prompt, row), add_special_tokens=False)["input_ids"])
        limit = self.args.max_prompt_length
        return ids[-limit:] if limit is not None else ids

    def sampling(self, step: int) -> Sampling:
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
                # A fixed seed would draw the same completions every step; the step keeps them reproducible yet new.
                seed=None if params.seed is None else int(params.seed) + step,
                stop=tuple([params.stop] if isinstance(params.stop, str) else params.stop or ()),
                include_stop_str_in_output=bool(params.include_stop_str_in_output),
                stop_token_ids=tuple(params.stop_token_ids or ()),
            )
        return Sampling(**values)

    def encode(self, row: Dict[str, Any]) -> Tuple[List[int], Optional[Dict[str, Any]]]:
        """The prompt's tokens, and the image features a vision prompt carries (none here)."""
        return self.prompt_ids(row["prompt"], row), None

    def sample(
        self, model: Any, prompt_ids: List[List[int]], features: List[Optional[Dict[str, Any]]], step: int
    ) -> List[Sampled]:
        """`num_generations` completions of each prompt, sampled together on the training model."""
        rows = [ids for ids in prompt_ids for _ in range(self.args.num_generations)]
        was_training = model.training
        model.eval()
        try:
            return sample_batch(model, self.tokenizer, rows, self.sampling(step))
        finally:
            if was_training:
                model.train()

    def reward_inputs(self, rows: List[Dict[str, Any]], texts: List[str]) -> Tuple[List[Any], List[Any]]:
        """The prompts and completions reward functions get: TRL's, a conversation's completion as an assistant turn."""
        if is_conversation(rows[0]["prompt"]):
            return [row["prompt"] for row in rows], [[{"role": "assistant", "content": text}] for text in texts]
        return [row["prompt"] for row in rows], texts

    def score(
        self,
        rows: List[Dict[str, Any]],
        completions: List[Any],
        completion_ids: List[List[int]],
        state: Any,
        prompts: Optional[List[Any]] = None,
    ):
        """Each reward function's values for every completion; one message naming a function that fails."""
        prompts = [row["prompt"] for row in rows] if prompts is None else prompts
        columns = {key: [row.get(key) for row in rows] for key in rows[0] if key not in OWN_COLUMNS}
        scores = np.zeros((len(rows), len(self.reward_funcs)), dtype=np.float32)
        for index, (function, name) in enumerate(zip(self.reward_funcs, self.reward_func_names)):
            try:
                values = function(
                    prompts=prompts,
                    completions=completions,
                    completion_ids=completion_ids,
                    trainer_state=state,
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

    def rollout(self, model: Any, prompt_rows: List[Dict[str, Any]], state: Any) -> Rollout:
        """Sample, score and rank one generation batch of `prompt_rows`, with TRL's generation metrics."""
        args = self.args
        generations = args.num_generations
        encoded = [self.encode(row) for row in prompt_rows]
        prompt_ids = [ids for ids, _ in encoded]
        prompt_features = [found for _, found in encoded]
        sampled = self.sample(model, prompt_ids, prompt_features, state.global_step)
        rows = [row for row in prompt_rows for _ in range(generations)]
        all_prompt_ids = [ids for ids in prompt_ids for _ in range(generations)]
        completion_ids = [item.token_ids for item in sampled]
        texts = [item.text for item in sampled]
        prompts, completions = self.reward_inputs(rows, texts)
        terminated = [item.finish_reason == "stop" for item in sampled]
        masks = [
            [0 if args.mask_truncated_completions and not ended else 1] * len(ids)
            for ids, ended in zip(completion_ids, terminated)
        ]
        rewards, own = self.score(rows, completions, completion_ids, state, prompts), slice(None)
        if self.gather_rewards is not None:
            rewards, own = self.gather_rewards(rewards)
        scores = group_advantages(rewards, self.reward_weights, generations, args.scale_rewards, self.reward_func_names)
        metrics = {**completion_metrics([len(ids) for ids in completion_ids], terminated), **scores.metrics}
        metrics["num_tokens"] = float(sum(len(p) + len(c) for p, c in zip(all_prompt_ids, completion_ids)))
        features = None
        if all(found is not None for found in prompt_features):
            features = [found or {} for found in prompt_features for _ in range(generations)]
        return Rollout(all_prompt_ids, completion_ids, masks, scores.advantages[own], metrics, features=features)
