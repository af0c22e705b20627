# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`from unsloth.chat_templates import get_chat_template, train_on_responses_only` on the MLX path.

`train_on_responses_only` becomes a router: an MLX trainer is masked by the MLX version, any other trainer still
goes to the datasets version that was there before. Neither loads mlx until it is called.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Optional

ROUTED_MARK = "__unsloth_mlx_routed__"


def route_chat_templates() -> None:
    """Give `unsloth.chat_templates` the MLX `get_chat_template` and the routing `train_on_responses_only` (once)."""
    from .. import chat_templates
    from .chat_templates import get_chat_template

    if getattr(chat_templates.train_on_responses_only, ROUTED_MARK, False):
        return
    datasets_version = chat_templates.train_on_responses_only

    @functools.wraps(datasets_version)
    def train_on_responses_only(
        trainer: Any, instruction_part: Optional[str] = None, response_part: Optional[str] = None, num_proc: Any = None
    ) -> Any:
        from unsloth_zoo.mlx.trainer import MLXTrainer

        if isinstance(trainer, MLXTrainer):
            mlx_version = importlib.import_module("unsloth.mlx.responses_only").train_on_responses_only
            return mlx_version(trainer, instruction_part, response_part, num_proc=num_proc)
        return datasets_version(trainer, instruction_part, response_part, num_proc=num_proc)

    setattr(train_on_responses_only, ROUTED_MARK, True)
    chat_templates.train_on_responses_only = train_on_responses_only
    chat_templates.get_chat_template = get_chat_template
