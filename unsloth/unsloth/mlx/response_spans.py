# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which tokens of a tokenized conversation belong to the assistant's answers, found by the markers' text.

Markers are looked up in the row's decoded text rather than as token ids, because a byte-level tokenizer splits
a marker alone differently from the same marker followed by words (a trailing "\\n\\n" is one token alone, two
in context). A token counts when its text starts inside an answer; with `force_match=False` it also counts when
it only reaches into one. Standard library only: the same masks serve the MLX trainer and `return_function=True`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

IGNORE_INDEX = -100
Span = Tuple[int, int]


def response_spans(
    text: str, instruction_part: str, response_part: str, last_response_only: bool = False
) -> List[Span]:
    """Character spans from the end of each response marker up to the next instruction marker (or the end)."""
    spans: List[Span] = []
    position = 0
    while True:
        start = text.find(response_part, position)
        if start < 0:
            break
        begin = start + len(response_part)
        end = text.find(instruction_part, begin)
        end = len(text) if end < 0 else end
        spans.append((begin, end))
        position = max(end, begin + 1)
    return spans[-1:] if last_response_only else spans


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> List[str]:
    """Each token's own text, in order (special tokens included), so their lengths give character offsets."""
    ids = [int(token) for token in ids]
    if hasattr(tokenizer, "batch_decode"):
        return list(
            tokenizer.batch_decode(
                [[token] for token in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        )
    return [tokenizer.decode([token]) for token in ids]


def token_mask(pieces: Sequence[str], spans: Sequence[Span], force_match: bool = True) -> List[bool]:
    """True for each token whose text starts inside a span (force_match) or overlaps one (force_match=False)."""
    mask: List[bool] = []
    offset = 0
    for piece in pieces:
        start, end = offset, offset + len(piece)
        offset = end
        if force_match:
            mask.append(any(begin <= start < stop for begin, stop in spans))
        else:
            mask.append(any(start < stop and end > begin for begin, stop in spans))
    return mask


def row_mask(
    tokenizer: Any,
    ids: Sequence[int],
    instruction_part: str,
    response_part: str,
    force_match: bool = True,
    last_response_only: bool = False,
) -> List[bool]:
    """The response mask of one tokenized row."""
    pieces = token_pieces(tokenizer, ids)
    spans = response_spans("".join(pieces), instruction_part, response_part, last_response_only)
    return token_mask(pieces, spans, force_match)


def labels_function(
    tokenizer: Any,
    instruction_part: str,
    response_part: str,
    force_match: bool = True,
    last_response_only: bool = False,
) -> Callable[[Dict[str, list]], Dict[str, list]]:
    """What `train_on_responses_only(..., return_function=True)` returns: a batched `map()` function adding `labels`."""

    def add_labels(examples: Dict[str, list]) -> Dict[str, list]:
        labels = []
        for ids in examples["input_ids"]:
            keep = row_mask(tokenizer, ids, instruction_part, response_part, force_match, last_response_only)
            labels.append([int(token) if kept else IGNORE_INDEX for token, kept in zip(ids, keep)])
        return {"labels": labels}

    return add_labels
