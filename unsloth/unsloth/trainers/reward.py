# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Reward modelling: chosen/rejected rows into input_ids_chosen/input_ids_rejected and their attention masks.

When the rows carry a `prompt`, each side is scored with the prompt's tokens in front of it.
"""

from __future__ import annotations

from typing import Any, Optional

import unsloth_num_proc

from .configs import RewardDatasetConfig
from .mapping import run_batched_map
from .tokenizing import attention_masks, encode_batch, truncate

REWARD_COLUMNS = ("prompt", "chosen", "rejected")


class TokenizeRewardPairs:
    """The batched map function; a class so it pickles cleanly into worker processes."""

    def __init__(self, tokenizer: Any, max_length: Optional[int]) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length

    def _side(self, batch: dict, column: str) -> list:
        if "prompt" not in batch:
            return [truncate(ids, self.max_length) for ids in encode_batch(self.tokenizer, batch[column])]
        prompts = encode_batch(self.tokenizer, batch["prompt"])
        completions = encode_batch(self.tokenizer, batch[column], add_special_tokens=False)
        return [truncate(prompt + completion, self.max_length) for prompt, completion in zip(prompts, completions)]

    def __call__(self, batch: dict) -> dict:
        chosen = self._side(batch, "chosen")
        rejected = self._side(batch, "rejected")
        return {
            "input_ids_chosen": chosen,
            "attention_mask_chosen": attention_masks(chosen),
            "input_ids_rejected": rejected,
            "attention_mask_rejected": attention_masks(rejected),
        }


def prepare_reward_dataset(dataset: Any, tokenizer: Any, config: RewardDatasetConfig) -> Any:
    return run_batched_map(
        dataset,
        TokenizeRewardPairs(tokenizer, config.max_length),
        unsloth_num_proc.map_request(config),
        remove_columns=REWARD_COLUMNS,
        desc="Tokenizing reward dataset",
    )
