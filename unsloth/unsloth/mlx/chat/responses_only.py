# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`train_on_responses_only` on MLX: the loss counts only the tokens of the assistant's answers.

Which tokens belong to an answer is found by the markers' text in the row's decoded text rather than as token ids,
because a byte-level tokenizer splits a marker alone differently from the same marker followed by words (a trailing
"\\n\\n" is one token alone, two in context). A token counts when its text starts inside an answer; with
`force_match=False` it also counts when it only reaches into one. The same masks serve `return_function=True`,
so this module imports only the standard library until an MLX trainer is masked.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .families import DEFAULT_INSTRUCTION_PART, DEFAULT_RESPONSE_PART  # noqa: F401 (the defaults, read by callers)
from .markers import find_markers

IGNORE_INDEX = -100
Span = Tuple[int, int]


def response_spans(
    text: str, instruction_part: str, response_part: str, last_response_only: bool = False
) -> List[Span]:
    """Character spans from the end of each response marker up to the next instruction marker (or the end), less
    the whitespace just before it."""
    spans: List[Span] = []
    position = 0
    while True:
        start = text.find(response_part, position)
        if start < 0:
            break
        begin = start + len(response_part)
        end = text.find(instruction_part, begin)
        end = len(text) if end < 0 else end
        position = max(end, begin + 1)
        # The whitespace after an answer's end-of-turn token separates turns; it is not part of the answer.
        while end > begin and text[end - 1].isspace():
            end -= 1
        spans.append((begin, end))
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


def response_masked_cross_entropy(model: Any, tokens: Any, lengths: Any, weights: Any) -> Tuple[Any, Any]:
    """Mean next-token loss over targets inside each row's length whose token the mask keeps, and their count."""
    from unsloth_zoo.mlx.loss import masked_cross_entropy

    # The zoo's loss, which takes the logits a chunk of positions at a time.
    return masked_cross_entropy(model, tokens, lengths, weights)


def train_on_responses_only(
    trainer: Any,
    instruction_part: Optional[str] = None,
    response_part: Optional[str] = None,
    force_match: bool = True,
    num_proc: Any = None,
    last_response_only: bool = False,
) -> Any:
    """Train an UnslothTrainer on responses only; `num_proc` keeps the CUDA signature (masking runs in-process)."""
    import numpy as np

    from unsloth_zoo.mlx.trainer import MLXTrainer

    if not isinstance(trainer, MLXTrainer) or not hasattr(trainer.train_rows, "set_masks"):
        raise TypeError(f"this train_on_responses_only masks an UnslothTrainer's loss, got {type(trainer).__name__}")
    if trainer.eval_rows:
        raise NotImplementedError(
            "train_on_responses_only on MLX masks the training loss only; the evaluation loss would still count every "
            "token. Build the trainer without eval_dataset to train on responses only."
        )
    markers = find_markers(trainer.tokenizer, instruction_part, response_part)
    instruction_part, response_part = markers.instruction_part, markers.response_part
    masks = [
        np.asarray(row_mask(trainer.tokenizer, row, instruction_part, response_part, force_match, last_response_only))
        for row in trainer.train_rows.source_rows
    ]
    if not any(mask.any() for mask in masks):
        raise ValueError(
            f"no training row contains the response marker {response_part!r} (markers from {markers.source}); "
            "check instruction_part and response_part"
        )
    trainer.train_rows.set_masks(masks)
    trainer.show_prepared_rows()
    return trainer
