# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""KTO: prompt/completion/label rows into prompt_input_ids/completion_input_ids, keeping `label`."""

from __future__ import annotations

from typing import Any, Optional

import unsloth_num_proc

from .configs import KTODatasetConfig
from .mapping import run_batched_map
from .tokenizing import KEEP_END, encode_column

UNPAIRED_TEXT_COLUMNS = ("prompt", "completion")


class TokenizeUnpaired:
    """The batched map function; a class so it pickles cleanly into worker processes."""

    def __init__(self, tokenizer: Any, max_prompt_length: Optional[int], max_completion_length: Optional[int]) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.max_completion_length = max_completion_length

    def __call__(self, batch: dict) -> dict:
        return {
            "prompt_input_ids": encode_column(
                self.tokenizer, batch["prompt"], max_length=self.max_prompt_length, keep=KEEP_END
            ),
            "completion_input_ids": encode_column(
                self.tokenizer, batch["completion"], max_length=self.max_completion_length, add_special_tokens=False
            ),
        }


def prepare_unpaired_dataset(dataset: Any, tokenizer: Any, config: KTODatasetConfig) -> Any:
    tokenize = TokenizeUnpaired(tokenizer, config.max_prompt_length, config.max_completion_length)
    return run_batched_map(
        dataset,
        tokenize,
        unsloth_num_proc.map_request(config),
        remove_columns=UNPAIRED_TEXT_COLUMNS,
        desc="Tokenizing KTO dataset",
    )
