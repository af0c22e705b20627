# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`train_on_responses_only` and `get_chat_template`.

A `datasets`-backed trainer gets the zoo's label masking, with `num_proc` written so serial never becomes
auto; a trainer built by the MLX backend gets the MLX masking instead.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import unsloth_num_proc

DEFAULT_INSTRUCTION_PART = "<|user|>\n"
DEFAULT_RESPONSE_PART = "<|assistant|>\n"
# The zoo reads an int request of 1 as in-process, so this is the safe value when no policy loads.
NO_POLICY_NUM_PROC = 1


def responses_only_num_proc(trainer: Any, num_proc: Any) -> Optional[int]:
    """The `num_proc` to hand the zoo for this trainer's splits, as the policy encodes it."""
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return NO_POLICY_NUM_PROC
    return policy.resolve_responses_only_num_proc(trainer, num_proc)


def _is_mlx_trainer(trainer: Any) -> bool:
    # Only an already-imported backend can have built this trainer, so mlx is never imported to find out.
    backend = sys.modules.get("unsloth_zoo.mlx.trainer")
    return backend is not None and isinstance(trainer, backend.MLXTrainer)


def get_chat_template(tokenizer: Any, *args: Any, **kwargs: Any) -> Any:
    """Give `tokenizer` one of the common chat formats (chatml, zephyr, llama-3) as its chat template."""
    from .mlx.chat_templates import get_chat_template as apply_chat_format

    return apply_chat_format(tokenizer, *args, **kwargs)


def train_on_responses_only(
    trainer: Any,
    instruction_part: Optional[str] = None,
    response_part: Optional[str] = None,
    num_proc: Any = None,
) -> Any:
    """Mask every split's labels to the assistant's responses; num_proc None auto-sizes, 0/1 stays in-process."""
    if _is_mlx_trainer(trainer):
        from .mlx.responses_only import train_on_responses_only as mlx_train_on_responses_only

        return mlx_train_on_responses_only(trainer, instruction_part, response_part, num_proc=num_proc)
    from unsloth_zoo.dataset_utils import train_on_responses_only as zoo_train_on_responses_only

    return zoo_train_on_responses_only(
        trainer,
        instruction_part if instruction_part is not None else DEFAULT_INSTRUCTION_PART,
        response_part if response_part is not None else DEFAULT_RESPONSE_PART,
        num_proc=responses_only_num_proc(trainer, num_proc),
    )
