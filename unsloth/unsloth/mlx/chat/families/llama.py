# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Llama 3, and Llama 3.1 to 3.3 with their system header (knowledge cut-off and date)."""

from __future__ import annotations

from typing import Dict

from . import go, jinja
from .base import ChatFamily

_HEADER = r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
_PROMPT = r"{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"

LLAMA_3 = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}{{- "
    + _HEADER
    + " + message['content'] | trim + '<|eot_id|>' -}}{%- endfor -%}"
    + _PROMPT
)

# The date is fixed unless the caller passes `date_string`; the system text is empty unless given.
LLAMA_3_1 = (
    "{{- bos_token -}}" + jinja.no_tools("llama-3.1") + ""
    "{%- set system = namespace(text='', skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system.text = messages[0]['content'] -%}{%- set system.skip = 1 -%}{%- endif -%}"
    r"{{- '<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ' -}}"
    r"{{- (date_string if date_string is defined else '26 July 2024') + '\n\n' + system.text + '<|eot_id|>' -}}"
    "{%- for message in messages[system.skip:] -%}"
    + jinja.no_tool_turns("llama-3.1")
    + "{{- "
    + _HEADER
    + " + message['content'] + '<|eot_id|>' -}}"
    "{%- endfor -%}" + _PROMPT
)

_TURN = "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
_GO_PROMPT = "<|start_header_id|>assistant<|end_header_id|>\n\n"
_GO_3_1 = (
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 July 2024\n\n"
    + go.SYSTEM
    + "<|eot_id|>"
    + go.NOT_SYSTEM
    + _TURN
    + "{{ end }}{{ end }}"
    + _GO_PROMPT
)
_PARTS = ("<|start_header_id|>user<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>\n\n")

FAMILIES: Dict[str, ChatFamily] = {
    "llama-3": ChatFamily(LLAMA_3, *_PARTS, "<|eot_id|>", go.each_turn(_TURN, _GO_PROMPT)),
    "llama-3.1": ChatFamily(LLAMA_3_1, *_PARTS, "<|eot_id|>", _GO_3_1),
}

ALIASES: Dict[str, str] = {
    "llama3": "llama-3",
    **{name: "llama-3.1" for name in ("llama-31", "llama-3.2", "llama-32", "llama-3.3", "llama-33")},
}
