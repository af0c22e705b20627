# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Token ids for batches of text, from a `tokenizers.Tokenizer` or a Hugging Face tokenizer alike."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

KEEP_START = "start"
KEEP_END = "end"


def encode_batch(tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool = True) -> List[List[int]]:
    """The token ids of each text, untruncated."""
    if hasattr(tokenizer, "encode_batch"):
        encodings = tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [list(encoding.ids) for encoding in encodings]
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]]


def truncate(ids: List[int], max_length: Optional[int], keep: str = KEEP_START) -> List[int]:
    """At most `max_length` ids, keeping the first ones or (for prompts, whose end matters most) the last ones."""
    if max_length is None or len(ids) <= max_length:
        return ids
    if keep == KEEP_END:
        return ids[len(ids) - max_length :]
    return ids[:max_length]


def encode_column(
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: Optional[int] = None,
    keep: str = KEEP_START,
    add_special_tokens: bool = True,
) -> List[List[int]]:
    """Token ids of each text, each truncated to `max_length`."""
    return [
        truncate(ids, max_length, keep) for ids in encode_batch(tokenizer, texts, add_special_tokens=add_special_tokens)
    ]


def attention_masks(rows: Sequence[Sequence[int]]) -> List[List[int]]:
    """All-ones masks matching each row's length (nothing is padded here)."""
    return [[1] * len(row) for row in rows]
