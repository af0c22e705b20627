# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Preference rows (`prompt`, `chosen`, `rejected`) checked, rendered and tokenized as TRL's trainers do.

Rows are strings or conversations (lists of `{"role", "content"}` messages); a bad row is refused with its
index before anything is tokenized. DPO tokenizes prompt and prompt + completion whole and splits at their common
prefix (TRL 1.x); ORPO renders conversations to text first and tokenizes without special tokens, adding BOS and EOS
(TRL's ORPO trainer). Each pair becomes `PreferencePair(prompt_ids, chosen_ids, rejected_ids)`.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence

COLUMNS = ("prompt", "chosen", "rejected")


class PreferencePair(NamedTuple):
    prompt_ids: List[int]
    chosen_ids: List[int]
    rejected_ids: List[int]


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) and "role" in item for item in value)


def _kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "a string"
    if is_conversation(value) and value:
        return "a conversation"
    return None


def _columns(dataset: Any) -> List[str]:
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return list(names)
    rows = list(dataset)
    return list(rows[0]) if rows and isinstance(rows[0], dict) else []


def checked_rows(dataset: Any, argument: str = "train_dataset") -> List[dict]:
    """The rows as dicts; ValueError naming the argument for missing columns, TypeError naming the first bad row."""
    if dataset is None:
        raise ValueError(f"{argument} is required: rows with 'prompt', 'chosen' and 'rejected'")
    missing = [name for name in COLUMNS if name not in _columns(dataset)]
    if missing:
        raise ValueError(
            f"{argument} has no {', '.join(repr(name) for name in missing)} column"
            f"{'' if len(missing) == 1 else 's'}: preference training needs 'prompt', 'chosen' and 'rejected' "
            f"(strings, or conversations as lists of messages); found {_columns(dataset)}"
        )
    rows = [dict(row) for row in dataset]
    if not rows:
        raise ValueError(f"{argument} has no rows")
    for index, row in enumerate(rows):
        kinds = {name: _kind(row[name]) for name in COLUMNS}
        for name, kind in kinds.items():
            if kind is None:
                raise TypeError(
                    f"{argument} row {index}: {name!r} must be a string or a non-empty list of messages "
                    f"({{'role': ..., 'content': ...}}), got {type(row[name]).__name__}: {row[name]!r:.80}"
                )
        if len(set(kinds.values())) > 1:
            raise TypeError(
                f"{argument} row {index}: 'prompt', 'chosen' and 'rejected' must all be strings or all be "
                f"conversations, got {', '.join(f'{name} {kind}' for name, kind in kinds.items())}"
            )
    return rows


def _ids(encoded: Any) -> List[int]:
    ids = encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded
    return [int(token) for token in ids]


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for left, right in zip(first, second):
        if left != right:
            break
        length += 1
    return length


def dpo_pair(tokenizer: Any, row: dict) -> PreferencePair:
    """TRL 1.x's DPO tokenization: EOS text appended to string completions, split where the token ids diverge."""
    prompt, chosen, rejected = (row[name] for name in COLUMNS)
    if is_conversation(prompt):

        def render(messages: list, **keywords: Any) -> List[int]:
            return _ids(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **keywords))

        prompt_ids = render(prompt, add_generation_prompt=True)
        with_chosen, with_rejected = render(prompt + chosen), render(prompt + rejected)
    else:
        eos = tokenizer.eos_token or ""
        chosen = chosen if chosen.endswith(eos) else chosen + eos
        rejected = rejected if rejected.endswith(eos) else rejected + eos
        prompt_ids = _ids(tokenizer(prompt))
        with_chosen, with_rejected = _ids(tokenizer(prompt + chosen)), _ids(tokenizer(prompt + rejected))
    split = min(common_prefix_length(prompt_ids, with_chosen), common_prefix_length(prompt_ids, with_rejected))
    return PreferencePair(prompt_ids[:split], with_chosen[split:], with_rejected[split:])


def rendered_text(tokenizer: Any, row: dict) -> dict:
    """A conversational row as the text TRL's `maybe_apply_chat_template` gives: the completion after the prompt."""
    prompt, chosen, rejected = (row[name] for name in COLUMNS)
    if not is_conversation(prompt):
        return row
    prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    texts = {"prompt": prompt_text}
    for name, completion in (("chosen", chosen), ("rejected", rejected)):
        whole = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
        texts[name] = whole[len(prompt_text) :] if whole.startswith(prompt_text) else whole
    return texts


def _answer(tokenizer: Any, prompt: str, answer: str) -> tuple:
    """Prompt and answer ids from `prompt + answer` tokenized whole, the prompt ending where its own ids end."""
    whole = _ids(tokenizer(prompt + answer, add_special_tokens=False))
    alone = _ids(tokenizer(prompt, add_special_tokens=False))
    start = len(alone)
    # Tokens may merge across the boundary; then the prompt's last token belongs to the answer.
    if alone != whole[:start]:
        start -= 1
    return whole[:start], whole[start:]


def orpo_pair(tokenizer: Any, row: dict, max_length: int, max_prompt_length: Optional[int]) -> PreferencePair:
    """TRL's ORPO tokenization: BOS before the prompt and EOS after each answer when missing, answers cut to fit."""
    texts = rendered_text(tokenizer, row)
    prompt_ids = _ids(tokenizer(texts["prompt"], add_special_tokens=False))
    chosen_prompt, chosen = _answer(tokenizer, texts["prompt"], texts["chosen"])
    rejected_prompt, rejected = _answer(tokenizer, texts["prompt"], texts["rejected"])
    prompt_ids = prompt_ids[: min(len(chosen_prompt), len(rejected_prompt))]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    if bos is not None:
        prompt_ids, chosen_prompt, rejected_prompt = (
            ids if ids and ids[0] == bos else [bos, *ids] for ids in (prompt_ids, chosen_prompt, rejected_prompt)
        )
    chosen, rejected = (ids if ids and ids[-1] == eos else [*ids, eos] for ids in (chosen, rejected))
    if max_prompt_length is not None and len(chosen_prompt) + max(len(chosen), len(rejected)) > max_length:
        # TRL 0.2x's ORPO keeps the end of a long prompt first, then cuts the answers.
        chosen_prompt = chosen_prompt[-max_prompt_length:]
    chosen = chosen[: max(0, max_length - len(chosen_prompt))]
    rejected = rejected[: max(0, max_length - len(chosen_prompt))]
    return PreferencePair(chosen_prompt, chosen, rejected)
