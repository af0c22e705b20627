# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""ChatML and the formats built on it: Qwen 2.5, Qwen 3 (hybrid, instruct and thinking), Phi-4, LFM 2, Yi."""

from __future__ import annotations

from typing import Dict

from . import go, jinja
from .base import ChatFamily

_TURN = r"{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
_PROMPT = r"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"

CHATML = (
    jinja.no_tools("chatml") + "{%- for message in messages -%}"
    "{%- set tag = message['role'] if message['role'] in ['user', 'assistant'] else 'system' -%}"
    r"{{- '<|im_start|>' + tag + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endfor -%}" + _PROMPT
)
# Every role written as given.
_EVERY_ROLE = "{%- for message in messages -%}" + _TURN + "{%- endfor -%}" + _PROMPT
YI = jinja.no_tools("yi-chat") + _EVERY_ROLE
LFM_2 = "{{- bos_token -}}" + jinja.no_tools("lfm-2") + _EVERY_ROLE

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
# Qwen's tool declarations close the system turn: each tool's JSON on its own line between <tools> tags.
_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call><|im_end|>\n"
)
_TOOLS = (
    "{{- " + jinja.literal(_TOOLS_HEAD) + " -}}"
    r"{%- for tool in tools -%}{{- '\n' + tool | tojson -}}{%- endfor -%}"
    "{{- " + jinja.literal(_TOOLS_TAIL) + " -}}"
)


def _tool_call(arguments: str) -> str:
    """Inside the loop over an assistant turn's `tool_calls`: one call (given flat or under `function`) as Qwen's
    <tool_call> JSON, its arguments written by `arguments` (a Jinja expression of `call`)."""
    return (
        "{%- set call = call['function'] if call['function'] is defined else call -%}"
        r"""{{- '<tool_call>\n{"name": "' + call['name'] + '", "arguments": ' + """
        + arguments
        + r" + '}\n</tool_call>' -}}"
    )


def _tool_results(content: str) -> str:
    """Inside the message loop: a run of tool turns is one user turn, each result (`content`, a Jinja expression)
    between <tool_response> tags."""
    return (
        "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
        r"{{- '\n<tool_response>\n' + " + content + r" + '\n</tool_response>' -}}"
        r"{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}"
    )


# Qwen 2.5 writes a system turn first (its default one unless given); the tools list ends it.
QWEN_2_5 = (
    r"{{- '<|im_start|>system\n' -}}"
    "{%- set has_system = messages[0]['role'] == 'system' -%}"
    "{{- messages[0]['content'] if has_system else " + jinja.literal(QWEN_SYSTEM) + " -}}"
    r"{%- if tools -%}{{- '\n\n' -}}" + _TOOLS + r"{%- else -%}{{- '<|im_end|>\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' or message['role'] == 'system' and not loop.first"
    " or message['role'] == 'assistant' and not message['tool_calls'] -%}" + _TURN + ""
    "{%- elif message['role'] == 'assistant' -%}"
    r"{{- '<|im_start|>assistant' -}}{%- if message['content'] -%}{{- '\n' + message['content'] -}}{%- endif -%}"
    r"{%- for call in message['tool_calls'] -%}{{- '\n' -}}" + _tool_call("call['arguments'] | tojson") + ""
    "{%- endfor -%}"
    r"{{- '<|im_end|>\n' -}}"
    "{%- elif message['role'] == 'tool' -%}" + _tool_results("message['content']") + ""
    "{%- elif message['role'] != 'system' -%}" + jinja.ONLY_KNOWN_ROLES + "{%- endif -%}"
    "{%- endfor -%}" + _PROMPT
)


def _qwen_3(reasoning_given: str, think_on_last: bool, prompt: str) -> str:
    """Qwen 3's formats: an assistant turn after the last question shows its reasoning in a think block (always,
    for the last turn, when `think_on_last`); reasoning comes from `reasoning_content` (when `reasoning_given`
    holds) or from a `<think>...</think>` head of the content. A tools list joins the system turn; tool calls
    follow the answer's text, and tool results are a user turn."""
    show = "(loop.last or reasoning)" if think_on_last else "reasoning"
    return (
        "{%- set has_system = messages[0]['role'] == 'system' -%}"
        r"{%- if tools -%}{{- '<|im_start|>system\n' -}}"
        r"{%- if has_system -%}{{- messages[0]['content'] + '\n\n' -}}{%- endif -%}" + _TOOLS + ""
        r"{%- elif has_system -%}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}"
        "{%- endif -%}"
        "{%- set last = namespace(question=messages | length - 1, found=false) -%}"
        "{%- for message in messages | reverse -%}"
        "{%- if not last.found and message['role'] == 'user' and message['content'] is string"
        " and not (message['content'].startswith('<tool_response>')"
        " and message['content'].endswith('</tool_response>')) -%}"
        "{%- set last.found = true -%}{%- set last.question = messages | length - loop.index -%}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- for message in messages -%}"
        "{%- set content = message['content'] if message['content'] is string else '' -%}"
        "{%- if message['role'] == 'assistant' -%}"
        "{%- if " + reasoning_given + " -%}{%- set reasoning = message['reasoning_content'] -%}"
        "{%- elif '</think>' in content -%}"
        r"{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
        r"{%- set content = content.split('</think>')[-1].lstrip('\n') -%}"
        "{%- else -%}{%- set reasoning = '' -%}{%- endif -%}"
        r"{{- '<|im_start|>assistant\n' -}}"
        "{%- if loop.index0 > last.question and " + show + " -%}"
        r"{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}"
        "{%- else -%}{{- content -}}{%- endif -%}"
        "{%- for call in message['tool_calls'] or [] -%}"
        r"{%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}"
        + _tool_call("(call['arguments'] if call['arguments'] is string else call['arguments'] | tojson)")
        + "{%- endfor -%}"
        r"{{- '<|im_end|>\n' -}}"
        "{%- elif message['role'] == 'tool' -%}" + _tool_results("content") + ""
        "{%- elif message['role'] == 'user' or message['role'] == 'system' and not loop.first -%}"
        r"{{- '<|im_start|>' + message['role'] + '\n' + content + '<|im_end|>\n' -}}"
        "{%- elif message['role'] != 'system' -%}" + jinja.ONLY_KNOWN_ROLES + "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}" + prompt + "{%- endif -%}"
    )


QWEN_3 = _qwen_3(
    "message['reasoning_content'] is defined and message['reasoning_content'] is not none",
    True,
    r"{{- '<|im_start|>assistant\n' -}}"
    r"{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}",
)
QWEN_3_INSTRUCT = _qwen_3("message['reasoning_content'] is string", False, r"{{- '<|im_start|>assistant\n' -}}")
QWEN_3_THINKING = _qwen_3("message['reasoning_content'] is string", True, r"{{- '<|im_start|>assistant\n<think>\n' -}}")

PHI_4 = (
    jinja.no_tools("phi-4")
    + "{%- for message in messages -%}{%- if message['role'] in ['system', 'user', 'assistant'] -%}"
    "{{- '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%}"
)

_PARTS = ("<|im_start|>user\n", "<|im_start|>assistant\n")
_GO_TURN = "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
_GO_PROMPT = "<|im_start|>assistant\n"
_GO_CHATML = go.each_turn(
    '<|im_start|>{{ if or (eq .Role "user") (eq .Role "assistant") }}{{ .Role }}{{ else }}system{{ end }}\n'
    "{{ .Content }}<|im_end|>\n",
    _GO_PROMPT,
)
_GO_QWEN_2_5 = (
    go.FIRST_IS_SYSTEM
    + "{{ else }}<|im_start|>system\n"
    + QWEN_SYSTEM
    + "<|im_end|>\n{{ end }}"
    + "{{ range .Messages }}"
    + _GO_TURN
    + "{{ end }}"
    + _GO_PROMPT
)
# Ollama's templates cannot split a think block out of the content; a turn's reasoning is left to the model.
_GO_QWEN_3 = go.each_turn(_GO_TURN, _GO_PROMPT)

FAMILIES: Dict[str, ChatFamily] = {
    "chatml": ChatFamily(CHATML, *_PARTS, "<|im_end|>", _GO_CHATML),
    "qwen-2.5": ChatFamily(QWEN_2_5, *_PARTS, "<|im_end|>", _GO_QWEN_2_5),
    "qwen-3": ChatFamily(QWEN_3, *_PARTS, "<|im_end|>", _GO_QWEN_3),
    "qwen3-instruct": ChatFamily(QWEN_3_INSTRUCT, *_PARTS, "<|im_end|>", _GO_QWEN_3),
    "qwen3-thinking": ChatFamily(QWEN_3_THINKING, *_PARTS, "<|im_end|>", _GO_QWEN_3 + "<think>\n"),
    "phi-4": ChatFamily(
        PHI_4,
        "<|im_start|>user<|im_sep|>",
        "<|im_start|>assistant<|im_sep|>",
        "<|im_end|>",
        go.each_turn("<|im_start|>{{ .Role }}<|im_sep|>{{ .Content }}<|im_end|>", "<|im_start|>assistant<|im_sep|>"),
    ),
    "lfm-2": ChatFamily(LFM_2, *_PARTS, "<|im_end|>", go.each_turn(_GO_TURN, _GO_PROMPT)),
    "yi-chat": ChatFamily(YI, *_PARTS, "<|im_end|>", go.each_turn(_GO_TURN, _GO_PROMPT)),
}

_QWEN_2_5_NAMES = ("qwen2.5", "qwen-25", "qwen25", "qwen-2.5-coder", "qwen-25-coder", "qwen2.5-coder", "qwen25-coder")
ALIASES: Dict[str, str] = {
    **{name: "qwen-2.5" for name in _QWEN_2_5_NAMES},
    "qwen3": "qwen-3",
    "lfm-2.5": "lfm-2",
}
