# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Dataset shapes notebooks convert before `apply_chat_template`: ShareGPT turns, instruction columns.

`standardize_sharegpt` turns `{"from": "human", "value": ...}` turns into `{"role": "user", "content": ...}` in the
column the dataset already uses (`conversations` or `messages`), keeping each turn's other keys (`thinking`,
`tool_calls`); `standardize_data_formats` also accepts instruction/input/output columns; `to_sharegpt`
merges any columns into one ShareGPT conversation per row. Each runs one `map()` through `unsloth_num_proc.sized_map`.
"""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Sequence

import unsloth_num_proc

SYSTEM_ALIASES = ("system",)
USER_ALIASES = ("user", "human", "input")
ASSISTANT_ALIASES = ("gpt", "assistant", "output")
CONVERSATION_COLUMNS = ("conversations", "messages")
_ROLE_KEYS = ("role", "from")
_CONTENT_KEYS = ("content", "value")
_OPTIONAL_BLOCK = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _conversation_column(dataset: Any) -> str:
    found = [name for name in CONVERSATION_COLUMNS if name in dataset.column_names]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(
            f"the dataset has both {' and '.join(found)} columns; remove the one that is not the conversation"
        )
    raise ValueError(
        f"no conversation column: expected one of {', '.join(CONVERSATION_COLUMNS)}, found {dataset.column_names}"
    )


def _key(turn: Dict[str, Any], choices: Sequence[str], what: str) -> str:
    for name in choices:
        if name in turn:
            return name
    raise ValueError(f"a conversation turn has no {what} key ({' or '.join(choices)}): {sorted(turn)}")


class _StandardizeTurns:
    """Rename each turn's role and keys; a class so `datasets` can pickle it into workers."""

    def __init__(self, column: str, roles: Dict[str, str]) -> None:
        self.column = column
        self.roles = roles

    def _turn(self, turn: Dict[str, Any]) -> Dict[str, Any]:
        role_key, content_key = _key(turn, _ROLE_KEYS, "role"), _key(turn, _CONTENT_KEYS, "content")
        role = turn[role_key]
        if role not in self.roles:
            raise ValueError(f"unknown role {role!r}; known roles: {', '.join(sorted(self.roles))}")
        extra = {name: value for name, value in turn.items() if name not in (role_key, content_key)}
        return {"role": self.roles[role], "content": turn[content_key], **extra}

    def __call__(self, batch: Dict[str, list]) -> Dict[str, list]:
        return {self.column: [[self._turn(turn) for turn in turns] for turns in batch[self.column]]}


def _role_table(system: Sequence[str], user: Sequence[str], assistant: Sequence[str]) -> Dict[str, str]:
    table = {alias: "system" for alias in system}
    table.update({alias: "user" for alias in user})
    table.update({alias: "assistant" for alias in assistant})
    return table


def standardize_sharegpt(
    dataset: Any,
    aliases_for_system: Sequence[str] = SYSTEM_ALIASES,
    aliases_for_user: Sequence[str] = USER_ALIASES,
    aliases_for_assistant: Sequence[str] = ASSISTANT_ALIASES,
    num_proc: Any = None,
) -> Any:
    """The dataset with its `conversations` (or `messages`) column as role/content turns (system, user, assistant)."""
    column = _conversation_column(dataset)
    convert = _StandardizeTurns(column, _role_table(aliases_for_system, aliases_for_user, aliases_for_assistant))
    return unsloth_num_proc.sized_map(dataset, convert, num_proc, batched=True)


class _InstructionColumns:
    """instruction (+ input) / output columns as a two-turn conversation."""

    def __call__(self, batch: Dict[str, list]) -> Dict[str, list]:
        inputs = batch.get("input") or [""] * len(batch["instruction"])
        conversations = []
        for instruction, extra, output in zip(batch["instruction"], inputs, batch["output"]):
            prompt = f"{instruction}\n\n{extra}" if extra else instruction
            conversations.append([{"role": "user", "content": prompt}, {"role": "assistant", "content": output}])
        return {"conversations": conversations}


def standardize_data_formats(
    dataset: Any,
    aliases_for_system: Sequence[str] = SYSTEM_ALIASES,
    aliases_for_user: Sequence[str] = USER_ALIASES,
    aliases_for_assistant: Sequence[str] = ASSISTANT_ALIASES,
    num_proc: Any = None,
) -> Any:
    """ShareGPT or role/content conversations, or instruction/input/output columns, as role/content turns."""
    columns = set(dataset.column_names)
    if columns & set(CONVERSATION_COLUMNS):
        return standardize_sharegpt(dataset, aliases_for_system, aliases_for_user, aliases_for_assistant, num_proc)
    if {"instruction", "output"} <= columns:
        return unsloth_num_proc.sized_map(
            dataset,
            _InstructionColumns(),
            num_proc,
            batched=True,
            remove_columns=[name for name in ("instruction", "input", "output") if name in columns],
        )
    raise ValueError(
        f"cannot tell this dataset's format from its columns {sorted(columns)}: expected a conversations / messages "
        "column, or instruction and output columns (use to_sharegpt to merge other columns)"
    )


def merge_prompt(merged_prompt: str, row: Dict[str, Any]) -> str:
    """`{column}` filled from the row; a `[[...]]` block is dropped when a column it names is empty."""

    def optional(match: re.Match) -> str:
        names = _PLACEHOLDER.findall(match.group(1))
        return "" if any(not str(row.get(name) or "") for name in names) else match.group(1)

    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in row:
            raise KeyError(f"merged_prompt names {{{name}}}, which is not a column ({', '.join(sorted(row))})")
        return str(row[name] if row[name] is not None else "")

    return _PLACEHOLDER.sub(fill, _OPTIONAL_BLOCK.sub(optional, merged_prompt))


class _ToShareGPT:
    def __init__(self, merged_prompt: str, output_column_name: str) -> None:
        self.merged_prompt = merged_prompt
        self.output_column_name = output_column_name

    def __call__(self, batch: Dict[str, list]) -> Dict[str, list]:
        size = len(next(iter(batch.values())))
        conversations = []
        for index in range(size):
            row = {name: values[index] for name, values in batch.items()}
            conversations.append(
                [
                    {"from": "human", "value": merge_prompt(self.merged_prompt, row)},
                    {"from": "gpt", "value": str(row[self.output_column_name])},
                ]
            )
        return {"conversations": conversations}


def _extended(conversations: List[list], extension: int, seed: int) -> List[list]:
    """Each conversation followed by `extension - 1` others drawn at random (seeded), as one longer chat."""
    draw = random.Random(seed)
    return [
        [turn for picked in [own, *draw.sample(conversations, extension - 1)] for turn in picked]
        for own in conversations
    ]


def to_sharegpt(
    dataset: Any,
    merged_prompt: str = "{instruction}",
    merged_column_name: str = "instruction",
    output_column_name: str = "output",
    remove_unused_columns: bool = True,
    conversation_extension: int = 1,
    random_state: int = 3407,
    num_proc: Any = None,
) -> Any:
    """Any columns as ShareGPT: `merged_prompt` (with `{column}` and optional `[[...]]` blocks) is the human turn."""
    if output_column_name not in dataset.column_names:
        raise ValueError(f"output_column_name={output_column_name!r} is not a column ({dataset.column_names})")
    if int(conversation_extension) < 1 or int(conversation_extension) > len(dataset):
        raise ValueError(f"conversation_extension must be between 1 and the row count, got {conversation_extension}")
    removed = list(dataset.column_names) if remove_unused_columns else []
    converted = unsloth_num_proc.sized_map(
        dataset, _ToShareGPT(merged_prompt, output_column_name), num_proc, batched=True, remove_columns=removed
    )
    if merged_column_name and not remove_unused_columns and merged_column_name not in dataset.column_names:
        merged = [turns[0]["value"] for turns in converted["conversations"]]
        converted = converted.add_column(merged_column_name, merged)
    if int(conversation_extension) > 1:
        longer = _extended(converted["conversations"], int(conversation_extension), int(random_state))
        columns = {name: converted[name] for name in converted.column_names if name != "conversations"}
        converted = type(converted).from_dict({**columns, "conversations": longer})
    return converted
