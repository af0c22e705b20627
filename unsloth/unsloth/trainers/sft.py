# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""SFT: the zoo's `sft_prepare_dataset` tokenizes the text field; without the zoo, the same map runs here.

The config's value reaches the zoo in the config encoding: None auto-sizes, 1 is in-process.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import unsloth_num_proc

from .configs import SFTDatasetConfig
from .mapping import run_batched_map
from .tokenizing import attention_masks, encode_column

DEFAULT_MAX_LENGTH = 1024


def _max_length(config: SFTDatasetConfig) -> int:
    return config.max_seq_length or config.max_length or DEFAULT_MAX_LENGTH


class TokenizeText:
    """The batched map function of the zoo-less path; a class so it pickles cleanly into worker processes."""

    def __init__(self, tokenizer: Any, text_field: str, max_length: int, formatting_func: Optional[Callable]) -> None:
        self.tokenizer = tokenizer
        self.text_field = text_field
        self.max_length = max_length
        self.formatting_func = formatting_func

    def __call__(self, batch: dict) -> dict:
        texts = self.formatting_func(batch) if self.formatting_func is not None else batch[self.text_field]
        ids = encode_column(self.tokenizer, texts, max_length=self.max_length)
        return {"input_ids": ids, "attention_mask": attention_masks(ids)}


def prepare_sft_dataset(
    dataset: Any, tokenizer: Any, config: SFTDatasetConfig, *, formatting_func: Optional[Callable] = None
) -> Any:
    try:
        from unsloth_zoo.dataset_utils import sft_prepare_dataset
    except ImportError:
        sft_prepare_dataset = None  # type: ignore[assignment]
    if sft_prepare_dataset is not None:
        return sft_prepare_dataset(dataset, tokenizer, config, formatting_func=formatting_func)
    tokenize = TokenizeText(tokenizer, config.dataset_text_field or "text", _max_length(config), formatting_func)
    columns = list(dataset.column_names or [])
    return run_batched_map(
        dataset, tokenize, unsloth_num_proc.map_request(config), remove_columns=columns, desc="Tokenizing SFT dataset"
    )
