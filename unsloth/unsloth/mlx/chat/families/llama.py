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
    "{{- bos_token -}}" + jinja.no_tools("llama-3") + ""
    "{%- for message in messages -%}{{- "
    + _HEADER
    + " + message['content'] | trim + '<|eot_id|>' -}}{%- endfor -%}"
    + _PROMPT
)

_FORMAT = (
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)
_IN_SYSTEM = (
    "You have access to the following functions. To call a function, please respond with JSON for a function call."
    + _FORMAT
)
_IN_USER = (
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\n" + _FORMAT
)
_NO_FIRST_QUESTION = "Cannot put tools in the first user message when there's no first user message!"


def _tool_list(guide: str) -> str:
    return (
        "{{- "
        + jinja.literal(guide)
        + r" -}}{%- for tool in tool_list -%}{{- tool | tojson(indent=4) + '\n\n' -}}{%- endfor -%}"
    )


# A call to one of `builtin_tools` is Python after <|python_tag|>, and ends with <|eom_id|> while they are given.
_TOOL_CALL = (
    "{%- if message['tool_calls'] | length != 1 -%}"
    + jinja.refuse("This model only supports single tool-calls at once!")
    + "{%- endif -%}"
    "{%- set call = message['tool_calls'][0]['function'] -%}"
    r"{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}"
    "{%- if builtin_tools is defined and call['name'] in builtin_tools -%}"
    "{{- '<|python_tag|>' + call['name'] + '.call(' -}}"
    "{%- for name, value in call['arguments'] | items -%}"
    "{{- name + '=\"' + value + '\"' -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}{{- ')' -}}"
    "{%- else -%}"
    """{{- '{"name": "' + call['name'] + '", "parameters": ' + call['arguments'] | tojson + '}' -}}"""
    "{%- endif -%}"
    "{{- '<|eom_id|>' if builtin_tools is defined else '<|eot_id|>' -}}"
)
# A tool's result is an ipython turn; anything iterable (a string too) is written as JSON, as upstream's.
_TOOL_RESULT = (
    r"{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' -}}"
    "{%- set result = message['content'] -%}"
    "{{- (result | tojson if result is mapping or result is iterable else result) + '<|eot_id|>' -}}"
)

# The date is fixed unless the caller passes `date_string`; the system text is empty unless given. Tools (or
# `custom_tools`) go in the first user turn, or in the system turn with `tools_in_user_message=False`.
LLAMA_3_1 = (
    "{{- bos_token -}}"
    "{%- set tool_list = custom_tools if custom_tools is defined else (tools if tools is defined else none) -%}"
    "{%- set in_user = tools_in_user_message if tools_in_user_message is defined else true -%}"
    "{%- set system = namespace(text='', skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system.text = messages[0]['content'] -%}{%- set system.skip = 1 -%}{%- endif -%}"
    r"{{- '<|start_header_id|>system<|end_header_id|>\n\n' -}}"
    r"{%- if builtin_tools is defined or tool_list is not none -%}{{- 'Environment: ipython\n' -}}{%- endif -%}"
    "{%- if builtin_tools is defined -%}"
    r"{{- 'Tools: ' + builtin_tools | reject('equalto', 'code_interpreter') | join(', ') + '\n\n' -}}"
    "{%- endif -%}"
    r"{{- 'Cutting Knowledge Date: December 2023\nToday Date: ' -}}"
    r"{{- (date_string if date_string is defined else '26 July 2024') + '\n\n' -}}"
    "{%- if tool_list is not none and not in_user -%}" + _tool_list(_IN_SYSTEM) + "{%- endif -%}"
    "{{- system.text + '<|eot_id|>' -}}"
    "{%- if in_user and tool_list is not none -%}"
    "{%- if messages | length == system.skip -%}" + jinja.refuse(_NO_FIRST_QUESTION) + "{%- endif -%}"
    r"{{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}" + _tool_list(_IN_USER) + ""
    "{{- messages[system.skip]['content'] + '<|eot_id|>' -}}{%- set system.skip = system.skip + 1 -%}"
    "{%- endif -%}"
    "{%- for message in messages[system.skip:] -%}"
    "{%- if message['role'] in ['tool', 'ipython'] -%}" + _TOOL_RESULT + ""
    "{%- elif 'tool_calls' in message -%}" + _TOOL_CALL + ""
    "{%- else -%}{{- " + _HEADER + " + message['content'] + '<|eot_id|>' -}}{%- endif -%}"
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
