# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The chat formats CUDA Unsloth's `get_chat_template` names, one module per group, gathered into one table.

A family's facts live in its row (`ChatFamily`): its Jinja template (written here, rendered by the tokenizer's
`apply_chat_template` byte for byte as CUDA Unsloth's own template), the markers `train_on_responses_only` looks
for, the text that ends an answer, and its Ollama template. Standard library only, so importing it is cheap.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from . import chatml, classic, gemma, gpt_oss, llama
from .base import ChatFamily

__all__ = [
    "ALIASES",
    "DEFAULT_INSTRUCTION_PART",
    "DEFAULT_RESPONSE_PART",
    "FAMILIES",
    "ChatFamily",
    "family_name",
    "family_of_template",
    "response_parts",
]

DEFAULT_INSTRUCTION_PART = "<|user|>\n"
DEFAULT_RESPONSE_PART = "<|assistant|>\n"

_GROUPS = (llama, chatml, gemma, classic, gpt_oss)
FAMILIES: Dict[str, ChatFamily] = {name: family for group in _GROUPS for name, family in group.FAMILIES.items()}
# Other spellings CUDA Unsloth notebooks use for the same formats.
ALIASES: Dict[str, str] = {alias: name for group in _GROUPS for alias, name in group.ALIASES.items()}


def family_name(chat_template: str) -> str:
    """The table's name for `chat_template`; ValueError listing every name (and alias) known."""
    name = ALIASES.get(chat_template, chat_template)
    if name not in FAMILIES:
        choices = ", ".join(sorted({*FAMILIES, *ALIASES}))
        raise ValueError(
            f"chat_template={chat_template!r} is not available; choose one of {choices}, "
            "or pass a (jinja_template, eos_token) tuple"
        )
    return name


def response_parts(chat_template: str) -> Tuple[str, str]:
    """The (instruction_part, response_part) markers `train_on_responses_only` needs for this format."""
    family = FAMILIES[family_name(chat_template)]
    return family.instruction_part, family.response_part


def family_of_template(template: Optional[str]) -> Optional[str]:
    """The table's name whose Jinja source ends `template` (a mapping or system prologue may precede it)."""
    if not template:
        return None
    # The longest match wins: Gemma's ChatML ends with ChatML's own text.
    matches = [name for name, family in FAMILIES.items() if template.endswith(family.template)]
    return max(matches, key=lambda name: len(FAMILIES[name].template), default=None)
