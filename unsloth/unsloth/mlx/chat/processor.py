# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`get_chat_template` on a vision processor: the text tokenizer inside it, and the text an image part becomes.

A processor (text and images) keeps its tokenizer at `.tokenizer`; the chat format goes on both, since
`processor.apply_chat_template` reads the processor's own template. An `{"type": "image"}` part must render as
the placeholder the processor expands into image tokens, or the processor finds no image in the prompt.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

# Each family's image placeholder as its published template writes it.
FAMILY_IMAGE_TEXT = {
    "gemma-3": "<start_of_image>",
    "gemma-3n": "<image_soft_token>",
    "gemma-4": "<|image|>",
    "gemma-4-thinking": "<|image|>",
    "gemma-4-thought-in-history": "<|image|>",
    "qwen-2.5": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen-3": "<|vision_start|><|image_pad|><|vision_end|>",
    "chatml": "<|vision_start|><|image_pad|><|vision_end|>",
    "llama-3.1": "<|image|>",
}
# Processor attributes naming the text a processor expands into an image's tokens, the most specific first.
PROCESSOR_IMAGE_ATTRIBUTES = ("boi_token", "image_token")


def is_processor(owner: Any) -> bool:
    """A multimodal processor: a tokenizer of its own at `.tokenizer` and an image processor."""
    return getattr(owner, "tokenizer", None) is not None and getattr(owner, "image_processor", None) is not None


def _in_vocabulary(tokenizer: Any, text: str) -> bool:
    vocabulary = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return all(piece in vocabulary for piece in text.replace("><", ">\0<").split("\0"))


def image_text(processor: Any, family: Optional[str]) -> str:
    """The placeholder an image part renders as: the family's when this tokenizer holds it, else the processor's."""
    tokenizer = processor.tokenizer
    if family in FAMILY_IMAGE_TEXT and _in_vocabulary(tokenizer, FAMILY_IMAGE_TEXT[family]):
        return FAMILY_IMAGE_TEXT[family]
    for attribute in PROCESSOR_IMAGE_ATTRIBUTES:
        value = getattr(processor, attribute, None)
        if isinstance(value, str) and value:
            return value
    raise ValueError(
        f"get_chat_template: cannot tell what text an image becomes for this {type(processor).__name__} "
        f"(no {' or '.join(PROCESSOR_IMAGE_ATTRIBUTES)}); pass its tokenizer (processor.tokenizer) for text-only chats"
    )


def text_owner(tokenizer_or_processor: Any, family: Optional[str]) -> Tuple[Any, Optional[str]]:
    """(the text tokenizer, the image placeholder or None) for a tokenizer or a processor."""
    if not is_processor(tokenizer_or_processor):
        return tokenizer_or_processor, None
    return tokenizer_or_processor.tokenizer, image_text(tokenizer_or_processor, family)
