# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""PRM: a prompt and step-wise completions with one label per step, into input_ids and token-level labels.

Each step is tokenized with the step separator after it; its label (0 or 1) sits on the step's last
token, and every other token, the prompt's included, is IGNORE_INDEX.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import unsloth_num_proc

from .configs import PRMDatasetConfig
from .mapping import run_batched_map
from .tokenizing import attention_masks, encode_batch, truncate

IGNORE_INDEX = -100
STEPWISE_COLUMNS = ("prompt", "completions", "labels")
TOKENIZED_COLUMNS = ("input_ids", "attention_mask", "labels")


def label_steps(prompt_ids: List[int], step_ids: Sequence[List[int]], step_labels: Sequence[Any]) -> Tuple[list, list]:
    """(input_ids, labels) for one row; a step that tokenizes to nothing carries no label."""
    input_ids = list(prompt_ids)
    labels = [IGNORE_INDEX] * len(prompt_ids)
    for ids, label in zip(step_ids, step_labels):
        if not ids:
            continue
        input_ids.extend(ids)
        labels.extend([IGNORE_INDEX] * (len(ids) - 1) + [int(bool(label))])
    return input_ids, labels


class TokenizeSteps:
    """The batched map function; a class so it pickles cleanly into worker processes."""

    def __init__(self, tokenizer: Any, max_length: Optional[int], step_separator: str) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.step_separator = step_separator

    def __call__(self, batch: dict) -> dict:
        prompts = encode_batch(self.tokenizer, batch["prompt"])
        all_ids, all_labels = [], []
        for prompt_ids, steps, step_labels in zip(prompts, batch["completions"], batch["labels"]):
            if len(steps) != len(step_labels):
                raise ValueError(f"a PRM row has {len(steps)} completion steps but {len(step_labels)} labels")
            texts = [step + self.step_separator for step in steps]
            step_ids = encode_batch(self.tokenizer, texts, add_special_tokens=False) if texts else []
            ids, labels = label_steps(prompt_ids, step_ids, step_labels)
            all_ids.append(truncate(ids, self.max_length))
            all_labels.append(truncate(labels, self.max_length))
        return {"input_ids": all_ids, "attention_mask": attention_masks(all_ids), "labels": all_labels}


def prepare_stepwise_dataset(dataset: Any, tokenizer: Any, config: PRMDatasetConfig) -> Any:
    return run_batched_map(
        dataset,
        TokenizeSteps(tokenizer, config.max_length, config.step_separator),
        unsloth_num_proc.map_request(config),
        remove_columns=STEPWISE_COLUMNS,
        int_list_columns=TOKENIZED_COLUMNS,
        desc="Tokenizing PRM dataset",
    )
