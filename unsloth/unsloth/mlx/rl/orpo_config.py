# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`ORPOConfig` on MLX: TRL's ORPO keywords (0.2x and 1.x spellings) on top of the shared training arguments."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple

from .config import RLTrainingArguments


class ORPOConfig(RLTrainingArguments):
    """TRL's `ORPOConfig`: `beta` weighs the odds-ratio term; `max_length` / `max_prompt_length` cut the rows."""

    METHOD_KEYWORDS: ClassVar[Dict[str, Any]] = {
        "beta": 0.1,
        "max_prompt_length": None,
        "max_completion_length": None,
        "disable_dropout": True,
    }
    # TRL keywords whose default is what this trainer does; any other value is refused by name.
    ACCEPTED_AT_DEFAULT: ClassVar[Dict[str, Tuple[Any, ...]]] = {
        "truncation_mode": ("keep_end", "keep_start", None),
        "label_pad_token_id": (-100,),
        "padding_value": (None,),
        "generate_during_eval": (False,),
        "is_encoder_decoder": (None, False),
    }

    def check_method_keywords(self) -> None:
        beta = self.beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or beta <= 0:
            raise ValueError(f"ORPOConfig(beta={beta!r}) must be a positive number")
        for name in ("max_prompt_length", "max_completion_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"ORPOConfig({name}={value!r}) must be a positive int or None")
