# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""DPO, CPO and ORPO: prompt/chosen/rejected rows into prompt_input_ids/chosen_input_ids/rejected_input_ids."""

from __future__ import annotations

from typing import Any, Optional

import unsloth_num_proc

from .configs import PairedPreferenceDatasetConfig
from .mapping import run_batched_map
from .tokenizing import KEEP_END, encode_column

PAIRED_PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")


class TokenizePairedPreference:
    """The batched map function; a class so it pickles cleanly into worker processes."""

    def __init__(self, tokenizer: Any, max_prompt_length: Optional[int], max_completion_length: Optional[int]) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.max_completion_length = max_completion_length

    def _completions(self, texts: list) -> list:
        # Completions continue the prompt, so they get no special tokens of their own.
        return encode_column(self.tokenizer, texts, max_length=self.max_completion_length, add_special_tokens=False)

    def __call__(self, batch: dict) -> dict:
        return {
            "prompt_input_ids": encode_column(
                self.tokenizer, batch["prompt"], max_length=self.max_prompt_length, keep=KEEP_END
            ),
            "chosen_input_ids": self._completions(batch["chosen"]),
            "rejected_input_ids": self._completions(batch["rejected"]),
        }


def prepare_paired_preference_dataset(dataset: Any, tokenizer: Any, config: PairedPreferenceDatasetConfig) -> Any:
    tokenize = TokenizePairedPreference(tokenizer, config.max_prompt_length, config.max_completion_length)
    return run_batched_map(
        dataset,
        tokenize,
        unsloth_num_proc.map_request(config),
        remove_columns=PAIRED_PREFERENCE_COLUMNS,
        desc=f"Tokenizing {config.family.upper()} dataset",
    )
