# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`get_chat_template`: give a tokenizer one of a few common chat formats, written as Jinja here.

With `map_eos_token=True` (the default) every turn ends with the tokenizer's own EOS token instead of the format's
end marker, so a model trained on these texts learns to stop without the trainer appending anything.
"""

from __future__ import annotations

import json
from typing import Any, Dict, NamedTuple, Optional, Tuple


class ChatFormat(NamedTuple):
    role_open: str
    role_close: str
    turn_end: str
    starts_with_bos: bool


FORMATS: Dict[str, ChatFormat] = {
    "chatml": ChatFormat("<|im_start|>", "\n", "<|im_end|>", False),
    "zephyr": ChatFormat("<|", "|>\n", "</s>", False),
    "llama-3": ChatFormat("<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", True),
}
ALIASES = {"llama3": "llama-3", "llama-3.1": "llama-3", "llama-31": "llama-3", "unsloth": "chatml"}
DEFAULT_MAPPING = {"role": "role", "content": "content", "user": "user", "assistant": "assistant", "system": "system"}


def _literal(text: str) -> str:
    # JSON string syntax is also Jinja string syntax, escapes included.
    return json.dumps(text)


def format_name(chat_template: str) -> str:
    name = ALIASES.get(chat_template, chat_template)
    if name not in FORMATS:
        choices = ", ".join(sorted({*FORMATS, *ALIASES}))
        raise ValueError(f"chat_template={chat_template!r} is not available on MLX; choose one of {choices}")
    return name


def response_parts(chat_template: str) -> Tuple[str, str]:
    """The (instruction_part, response_part) markers `train_on_responses_only` needs for this format."""
    chat = FORMATS[format_name(chat_template)]
    return chat.role_open + "user" + chat.role_close, chat.role_open + "assistant" + chat.role_close


def _emit(expression: str) -> str:
    return "{{ " + expression + " }}"


def _turn(chat: ChatFormat, role: str, content: str, turn_end: str) -> str:
    """One turn: role header, content and end marker, each a Jinja expression."""
    header = _emit(_literal(chat.role_open)) + _emit(role) + _emit(_literal(chat.role_close))
    return header + _emit(content) + _emit(turn_end) + _emit(_literal("\n"))


def render_template(
    chat: ChatFormat, mapping: Dict[str, str], map_eos_token: bool, system_message: Optional[str]
) -> str:
    """The Jinja source: roles read through `mapping` (ShareGPT's from/value too), each turn closed by its marker."""
    roles = {mapping[role]: role for role in ("user", "assistant", "system")}
    role_of = f"roles.get(message[{_literal(mapping['role'])}], message[{_literal(mapping['role'])}])"
    content_of = f"message[{_literal(mapping['content'])}]"
    turn_end = "eos_token" if map_eos_token else _literal(chat.turn_end)
    parts = ["{%- set roles = " + json.dumps(roles) + " -%}"]
    if chat.starts_with_bos:
        parts.append("{%- if bos_token %}" + _emit("bos_token") + "{% endif -%}")
    if system_message is not None:
        first_role = f"roles.get(messages[0][{_literal(mapping['role'])}])"
        parts.append("{%- if messages|length == 0 or " + first_role + ' != "system" -%}')
        parts.append(_turn(chat, _literal("system"), _literal(system_message), turn_end) + "{%- endif -%}")
    parts.append("{%- for message in messages -%}" + _turn(chat, role_of, content_of, turn_end) + "{%- endfor -%}")
    generation_header = _emit(_literal(chat.role_open)) + "assistant" + _emit(_literal(chat.role_close))
    parts.append("{%- if add_generation_prompt -%}" + generation_header + "{%- endif -%}")
    return "".join(parts)


def get_chat_template(
    tokenizer: Any,
    chat_template: str = "chatml",
    mapping: Optional[Dict[str, str]] = None,
    map_eos_token: bool = True,
    system_message: Optional[str] = None,
) -> Any:
    """Set `tokenizer.chat_template` to the named format and return the tokenizer."""
    chat = FORMATS[format_name(chat_template)]
    full_mapping = {**DEFAULT_MAPPING, **(mapping or {})}
    tokenizer.chat_template = render_template(chat, full_mapping, map_eos_token, system_message)
    return tokenizer
