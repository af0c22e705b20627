# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Image, audio and video parts sent to a text-only model's tokenizer, refused by name before any template runs.

Our family templates refuse them inside Jinja; a model's own template (Gemma 4's writes a placeholder per part)
would render them into a prompt the text model answers without ever seeing the media, so the tokenizer checks first.
"""

from __future__ import annotations

from typing import Any, Iterator, List

# What follows a part's type when it is refused, shared with the family templates' own refusal.
UNSEEN_BY_TEXT_MODELS = (
    "' was given to a text-only model's tokenizer, and the model cannot see or hear it: load the checkpoint with "
    "FastVisionModel (or FastModel) to chat or train on images, audio or video"
)
_TEXT_PART = "text"


def _messages(conversation: Any) -> Iterator[Any]:
    """Each message of one conversation or of a batch of them."""
    if not isinstance(conversation, (list, tuple)):
        return
    for item in conversation:
        if isinstance(item, (list, tuple)):
            yield from item
        else:
            yield item


def unseen_part_types(conversation: Any) -> List[str]:
    """The types of the non-text content parts in a conversation (or a batch), in order of first appearance."""
    found: List[str] = []
    for message in _messages(conversation):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, (list, tuple)):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind is not None and kind != _TEXT_PART and kind not in found:
                found.append(str(kind))
    return found


def refuse_unseen_parts(conversation: Any) -> None:
    """ValueError naming the first image, audio or video part (any non-text part) of the conversation."""
    kinds = unseen_part_types(conversation)
    if kinds:
        raise ValueError(f"a content part of type '{kinds[0]}" + UNSEEN_BY_TEXT_MODELS)
