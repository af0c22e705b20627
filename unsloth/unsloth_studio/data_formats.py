# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Studio's dataset format conversions: alpaca rows to chat messages, chat messages to template text.

Both are `Dataset.map` sites sized at the map encoding (None = in-process); the mapped callables are
module-level so they pickle into worker processes.
"""

from __future__ import annotations

from typing import Any, Optional

from .map_site import run_map

ALPACA_COLUMNS = ("instruction", "input", "output")
CHAT_ROLES = ("system", "user", "assistant")
# Each turn is "<|role|>\n{content}<|eos|>\n": the role and end markers are the tokenizer's special tokens.
TURN_TEMPLATE = "<|{role}|>\n{content}<|eos|>\n"
GENERATION_PROMPT = "<|assistant|>\n"


def alpaca_messages(instruction: str, input_text: Optional[str], output: str) -> list:
    """One alpaca row as a user turn (instruction, then the input after a blank line when present) and an assistant turn."""
    user = instruction if not input_text else f"{instruction}\n\n{input_text}"
    return [{"role": "user", "content": user}, {"role": "assistant", "content": output}]


def alpaca_batch_to_messages(batch: dict) -> dict:
    """Batched map function: {"messages": [...]} for each alpaca row of `batch`."""
    inputs = batch.get("input") or [None] * len(batch["instruction"])
    rows = zip(batch["instruction"], inputs, batch["output"])
    return {"messages": [alpaca_messages(instruction, text, output) for instruction, text, output in rows]}


def alpaca_to_chat(dataset: Any, *, num_proc: Any = None) -> Any:
    """Replace the alpaca columns of `dataset` with a "messages" column; `num_proc` is a request (None = auto)."""
    columns = [name for name in ALPACA_COLUMNS if name in (dataset.column_names or [])]
    return run_map(
        dataset,
        alpaca_batch_to_messages,
        num_proc=num_proc,
        desc="Converting alpaca rows to chat",
        batched=True,
        remove_columns=columns,
    )


def render_chat(messages: list, *, add_generation_prompt: bool = False) -> str:
    """Messages as one training text in Studio's chat template."""
    turns = []
    for message in messages:
        role = message["role"]
        if role not in CHAT_ROLES:
            raise ValueError(f"unknown chat role {role!r}; expected one of {', '.join(CHAT_ROLES)}")
        turns.append(TURN_TEMPLATE.format(role=role, content=message["content"]))
    if add_generation_prompt:
        turns.append(GENERATION_PROMPT)
    return "".join(turns)


class RenderChatColumn:
    """Batched map function writing render_chat of `messages_field` into `text_field`; a class so it pickles."""

    def __init__(self, messages_field: str, text_field: str) -> None:
        self.messages_field = messages_field
        self.text_field = text_field

    def __call__(self, batch: dict) -> dict:
        return {self.text_field: [render_chat(messages) for messages in batch[self.messages_field]]}


def apply_chat_template(
    dataset: Any, *, num_proc: Any = None, messages_field: str = "messages", text_field: str = "text"
) -> Any:
    """Add `text_field` holding each row's chat rendered through the template; `num_proc` is a request."""
    return run_map(
        dataset,
        RenderChatColumn(messages_field, text_field),
        num_proc=num_proc,
        desc="Applying the chat template",
        batched=True,
    )
