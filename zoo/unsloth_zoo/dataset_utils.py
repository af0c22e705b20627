# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""The zoo's own `Dataset.map` sites: SFT tokenization and response-only label masking.

Each one runs through the policy's `sized_map`: sized at the map-site encoding (None = in-process) with its rows
and closure known, inside `map_failure_diagnostics`, so a dead worker explains itself.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .dataset_num_proc import NumProcDecision, explain_dataset_num_proc, map_request, sized_map

__all__ = ["encode_texts", "explain_sft_num_proc", "sft_prepare_dataset", "train_on_responses_only"]

IGNORE_INDEX = -100
# The SFT map hands whole batches to the tokenizer; its explanation and its map must size the same map.
SFT_MAP_BATCHED = True
DEFAULT_MAX_LENGTH = 2048


def encode_texts(tokenizer: Any, texts: Sequence[str], max_length: Optional[int] = None) -> dict:
    """Token ids and attention masks for `texts`, from a `tokenizers.Tokenizer` or a Hugging Face tokenizer."""
    if hasattr(tokenizer, "encode_batch"):
        ids = [
            encoding.ids[:max_length] if max_length else encoding.ids
            for encoding in tokenizer.encode_batch(list(texts))
        ]
        return {"input_ids": ids, "attention_mask": [[1] * len(row) for row in ids]}
    encoded = tokenizer(list(texts), truncation=max_length is not None, max_length=max_length)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def _encode_marker(tokenizer: Any, text: str) -> list:
    if hasattr(tokenizer, "encode_batch"):
        return tokenizer.encode(text, add_special_tokens=False).ids
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class _TokenizeText:
    """The SFT tokenization closure; a class so it pickles cleanly into workers."""

    def __init__(self, tokenizer: Any, text_field: str, max_length: int, formatting_func: Optional[Callable]) -> None:
        self.tokenizer = tokenizer
        self.text_field = text_field
        self.max_length = max_length
        self.formatting_func = formatting_func

    def __call__(self, batch: dict) -> dict:
        texts = self.formatting_func(batch) if self.formatting_func is not None else batch[self.text_field]
        return encode_texts(self.tokenizer, texts, self.max_length)


def _sft_tokenizer(tokenizer: Any, args: Any, formatting_func: Optional[Callable]) -> _TokenizeText:
    text_field = getattr(args, "dataset_text_field", None) or "text"
    max_length = getattr(args, "max_seq_length", None) or getattr(args, "max_length", None) or DEFAULT_MAX_LENGTH
    return _TokenizeText(tokenizer, text_field, max_length, formatting_func)


def explain_sft_num_proc(
    dataset: Any, tokenizer: Any, args: Any, *, formatting_func: Optional[Callable] = None
) -> NumProcDecision:
    """The policy's decision for the map `sft_prepare_dataset` runs on `dataset`, with its rows and closure known."""
    return explain_dataset_num_proc(
        map_request(args),
        rows=len(dataset),
        closure=_sft_tokenizer(tokenizer, args, formatting_func),
        batched=SFT_MAP_BATCHED,
    )


def sft_prepare_dataset(
    dataset: Any,
    tokenizer: Any,
    args: Any,
    *,
    formatting_func: Optional[Callable] = None,
    desc: str = "Tokenizing SFT dataset",
) -> Any:
    """Tokenize `args.dataset_text_field` of every row; `args.dataset_num_proc` None auto-sizes, 1 is serial.

    A config that recorded auto intent (see `record_intent`) is auto-sized here again, with the rows known.
    """
    batch_size = getattr(args, "dataset_batch_size", None) or 1000
    tokenize = _sft_tokenizer(tokenizer, args, formatting_func)
    columns = list(dataset.column_names or []) if hasattr(dataset, "column_names") else None
    return sized_map(
        dataset,
        tokenize,
        map_request(args),
        batched=SFT_MAP_BATCHED,
        batch_size=batch_size,
        remove_columns=columns,
        desc=desc,
    )


def _find(sequence: list, pattern: list, start: int) -> int:
    """Index of the first occurrence of `pattern` in `sequence` at or after `start`, or -1."""
    width = len(pattern)
    if width == 0:
        return -1
    first = pattern[0]
    for index in range(start, len(sequence) - width + 1):
        if sequence[index] == first and sequence[index : index + width] == pattern:
            return index
    return -1


class _MaskToResponses:
    """Labels equal to input_ids inside assistant responses, IGNORE_INDEX everywhere else."""

    def __init__(self, instruction_ids: list, response_ids: list) -> None:
        self.instruction_ids = instruction_ids
        self.response_ids = response_ids

    def __call__(self, batch: dict) -> dict:
        all_labels = []
        for ids in batch["input_ids"]:
            labels = [IGNORE_INDEX] * len(ids)
            position = 0
            while True:
                start = _find(ids, self.response_ids, position)
                if start < 0:
                    break
                begin = start + len(self.response_ids)
                end = _find(ids, self.instruction_ids, begin)
                end = len(ids) if end < 0 else end
                labels[begin:end] = ids[begin:end]
                position = end
            all_labels.append(labels)
        return {"labels": all_labels}


def _mask_split(split: Any, mask: _MaskToResponses, num_proc: Any) -> Any:
    return sized_map(split, mask, num_proc, batched=True, desc="Masking everything but responses")


def train_on_responses_only(trainer: Any, instruction_part: str, response_part: str, num_proc: Any = None) -> Any:
    """Mask the trainer's labels to IGNORE_INDEX everywhere but the assistant's responses, split by split."""
    tokenizer = getattr(trainer, "processing_class", None) or getattr(trainer, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("train_on_responses_only needs a trainer with a tokenizer or processing_class")
    mask = _MaskToResponses(_encode_marker(tokenizer, instruction_part), _encode_marker(tokenizer, response_part))
    for attribute in ("train_dataset", "eval_dataset"):
        value = getattr(trainer, attribute, None)
        if value is None:
            continue
        if isinstance(value, dict):
            masked = type(value)({name: _mask_split(split, mask, num_proc) for name, split in value.items()})
        else:
            masked = _mask_split(value, mask, num_proc)
        setattr(trainer, attribute, masked)
    return trainer
