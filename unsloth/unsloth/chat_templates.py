# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`train_on_responses_only`, `get_chat_template` and the dataset-format helpers notebooks import from here.

A `datasets`-backed trainer gets the zoo's label masking, with `num_proc` written so serial never becomes
auto; a trainer built by the MLX backend gets the MLX masking instead. Markers left unset come from the chat
family the tokenizer was given (`unsloth.mlx.chat.families`), else from its own template (`unsloth.mlx.chat.markers`).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import unsloth_num_proc

from .mlx.chat.families import DEFAULT_INSTRUCTION_PART, DEFAULT_RESPONSE_PART  # noqa: F401 (read by callers)
from .mlx.chat.markers import find_markers
from .mlx.chat.prompt_template import apply_chat_template
from .mlx.chat.sharegpt import standardize_data_formats, standardize_sharegpt, to_sharegpt

__all__ = [
    "apply_chat_template",
    "get_chat_template",
    "train_on_responses_only",
    "standardize_sharegpt",
    "standardize_data_formats",
    "to_sharegpt",
]


def _is_mlx_trainer(trainer: Any) -> bool:
    # Only an already-imported backend can have built this trainer, so mlx is never imported to find out.
    backend = sys.modules.get("unsloth_zoo.mlx.trainer")
    return backend is not None and isinstance(trainer, backend.MLXTrainer)


def get_chat_template(tokenizer: Any, *args: Any, **kwargs: Any) -> Any:
    """Give `tokenizer` a family's chat format (llama-3.1, qwen-2.5, gemma-3, ...) or a (template, eos) tuple."""
    from .mlx.chat.templates import get_chat_template as apply_chat_format

    return apply_chat_format(tokenizer, *args, **kwargs)


def _trainer_tokenizer(trainer: Any, tokenizer: Any) -> Any:
    found = tokenizer
    for attribute in ("processing_class", "tokenizer"):
        if found is None:
            found = getattr(trainer, attribute, None)
    # A processor (text and images) keeps the text tokenizer at `.tokenizer`.
    return getattr(found, "tokenizer", None) or found


def resolve_markers(tokenizer: Any, instruction_part: Optional[str], response_part: Optional[str]) -> tuple:
    """Markers left as None from the family table, else read from the tokenizer's own chat template."""
    found = find_markers(tokenizer, instruction_part, response_part)
    return found.instruction_part, found.response_part


def train_on_responses_only(
    trainer: Any,
    instruction_part: Optional[str] = None,
    response_part: Optional[str] = None,
    force_match: bool = True,
    tokenizer: Any = None,
    return_function: bool = False,
    num_proc: Any = None,
    last_response_only: bool = False,
) -> Any:
    """Mask every split's labels to the assistant's responses; num_proc None auto-sizes, 0/1 stays in-process.

    `return_function=True` returns the batched `map()` function that adds `labels` instead of changing a trainer.
    """
    text_tokenizer = _trainer_tokenizer(trainer, tokenizer)
    instruction_part, response_part = resolve_markers(text_tokenizer, instruction_part, response_part)
    if return_function:
        if text_tokenizer is None:
            raise ValueError("train_on_responses_only(return_function=True) needs tokenizer= or a trainer holding one")
        from .mlx.chat.responses_only import labels_function

        return labels_function(text_tokenizer, instruction_part, response_part, force_match, last_response_only)
    if _is_mlx_trainer(trainer):
        from .mlx.chat.responses_only import train_on_responses_only as mlx_train_on_responses_only

        return mlx_train_on_responses_only(
            trainer,
            instruction_part,
            response_part,
            force_match=force_match,
            num_proc=num_proc,
            last_response_only=last_response_only,
        )
    if last_response_only or not force_match:
        raise NotImplementedError(
            "train_on_responses_only on a datasets-backed trainer masks every response by exact token match; for "
            "last_response_only=True or force_match=False, map the function from return_function=True over the dataset"
        )
    from unsloth_zoo.dataset_utils import train_on_responses_only as zoo_train_on_responses_only

    return zoo_train_on_responses_only(
        trainer, instruction_part, response_part, num_proc=unsloth_num_proc.responses_only_num_proc(trainer, num_proc)
    )
