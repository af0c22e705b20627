# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma's formats: Gemma 1 and 2, Gemma with ChatML turns, Gemma 3 and 3n, and Gemma 4 (with its thinking variant)."""

from __future__ import annotations

from typing import Dict

from . import go, jinja
from .base import ChatFamily
from .chatml import CHATML

_PROMPT = r"{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
_ALTERNATE = (
    "{%- if loop.index0 is even and message['role'] != 'user' or loop.index0 is odd and message['role'] == 'user' -%}"
    + jinja.refuse("Conversation roles must alternate user/assistant/user/assistant/...")
    + "{%- endif -%}"
)

# Gemma 1 and 2 have no system turn: the system text and the next turn's are joined into the first user turn.
GEMMA_2 = (
    "{{- bos_token -}}" + jinja.no_tools("gemma-2") + ""
    "{%- set first = namespace(skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    r"{{- '<start_of_turn>user\n' + messages[0]['content'] | trim + ' ' + messages[1]['content'] | trim -}}"
    r"{{- '<end_of_turn>\n' -}}{%- set first.skip = 2 -%}"
    "{%- endif -%}"
    "{%- for message in messages[first.skip:] -%}"
    "{%- if message['role'] not in ['user', 'assistant'] -%}" + jinja.ONLY_USER_AND_ASSISTANT + "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    r"{{- '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' -}}"
    "{%- endfor -%}" + _PROMPT
)

GEMMA_CHATML = "{{- bos_token -}}" + CHATML

# Gemma 3 (and 3n) put the system text, then a blank line, at the head of the first user turn.
GEMMA_3 = (
    "{{- bos_token -}}" + jinja.no_tools("gemma-3") + ""
    "{%- set first = namespace(prefix='', skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    r"{%- set first.prefix = messages[0]['content'] + '\n\n' -%}{%- set first.skip = 1 -%}"
    "{%- endif -%}"
    "{%- for message in messages[first.skip:] -%}" + _ALTERNATE + ""
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    r"{{- '<start_of_turn>' + role + '\n' + (first.prefix if loop.first else '') + message['content'] | trim -}}"
    r"{{- '<end_of_turn>\n' -}}"
    "{%- endfor -%}" + _PROMPT
)

# A model turn's text loses what sits between <|channel> and <channel|> (its thinking), then its edge whitespace.
_VISIBLE = (
    "{%- macro visible(text) -%}{%- set kept = namespace(text='') -%}"
    "{%- for piece in text.split('<channel|>') -%}{%- set kept.text = kept.text + piece.split('<|channel>')[0] -%}"
    "{%- endfor -%}{{- kept.text | trim -}}{%- endmacro -%}"
)


def _gemma_4(family: str, empty_thought_prompt: bool, thought_in_history: bool = False) -> str:
    """Gemma 4: `enable_thinking=True` opens the system turn with <|think|>; the thinking variant's generation
    prompt carries an empty thought channel when thinking is off. With `thought_in_history` (the larger Gemma 4
    models, whose own template primes that channel) every model turn opens its channel: with the turn's
    `reasoning` (or `reasoning_content`) after the last question, empty when thinking is off."""
    prompt = r"{{- '<|turn>model\n' -}}"
    history = ""
    if thought_in_history:
        history = (
            "{%- if role == 'model' -%}"
            "{%- set thought = message.get('reasoning') or message.get('reasoning_content') -%}"
            "{%- if thought and loop.index0 > last.user -%}"
            r"{{- '<|channel>thought\n' + thought + '\n<channel|>' -}}"
            r"{%- elif not thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}"
            "{%- endif -%}"
        )
    if empty_thought_prompt:
        prompt += r"{%- if not thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}"
    return (
        _VISIBLE + jinja.no_tools(family, jinja.NOT_YET) + "{%- set thinking = enable_thinking is defined and enable_thinking -%}"
        "{%- set first = namespace(skip=0) -%}"
        "{%- set has_system = messages[0]['role'] in ['system', 'developer'] -%}"
        "{%- if has_system or thinking -%}"
        r"{{- '<|turn>system\n' -}}{%- if thinking -%}{{- '<|think|>\n' -}}{%- endif -%}"
        "{%- if has_system -%}{{- messages[0]['content'] | trim -}}{%- set first.skip = 1 -%}{%- endif -%}"
        r"{{- '<turn|>\n' -}}"
        "{%- endif -%}"
        "{%- set last = namespace(user=-1) -%}"
        "{%- for message in messages[first.skip:] -%}"
        "{%- if message['role'] == 'user' -%}{%- set last.user = loop.index0 -%}{%- endif -%}"
        "{%- endfor -%}"
        "{%- for message in messages[first.skip:] -%}" + jinja.no_tool_turns(family) + _ALTERNATE + ""
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
        r"{{- '<|turn>' + role + '\n' -}}" + history + ""
        "{%- if role == 'model' -%}{{- visible(message['content']) -}}"
        "{%- else -%}{{- message['content'] | trim -}}{%- endif -%}"
        r"{{- '<turn|>\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}" + prompt + "{%- endif -%}"
    )


GEMMA_4 = _gemma_4("gemma-4", False)
GEMMA_4_THINKING = _gemma_4("gemma-4-thinking", True)
GEMMA_4_THOUGHT_IN_HISTORY = _gemma_4("gemma-4", True, thought_in_history=True)
# What a Gemma 4 model's own template holds when the model expects the empty thought channel on every answer.
EMPTY_THOUGHT_CHANNEL = ("<|channel>thought\n<channel|>", "<|channel>thought\\n<channel|>")

_PARTS = ("<start_of_turn>user\n", "<start_of_turn>model\n")
_GO_PROMPT = "<start_of_turn>model\n"


def _go_first_user_gets_system(separator: str) -> str:
    return (
        go.SYSTEM_AND_FIRST
        + go.NOT_SYSTEM
        + "<start_of_turn>"
        + go.GEMMA_ROLE
        + "\n{{ if $first }}{{ if $system }}{{ $system }}"
        + separator
        + "{{ end }}{{ end }}{{ .Content }}<end_of_turn>\n{{ $first = false }}{{ end }}{{ end }}"
        + _GO_PROMPT
    )


_GO_GEMMA_4 = (
    '{{- range .Messages }}{{ if eq .Role "system" }}<|turn>system\n{{ .Content }}<turn|>\n'
    "{{ else }}<|turn>" + go.GEMMA_ROLE + "\n{{ .Content }}<turn|>\n{{ end }}{{ end }}<|turn>model\n"
)
_GO_CHATML = go.each_turn(
    '<|im_start|>{{ if or (eq .Role "user") (eq .Role "assistant") }}{{ .Role }}{{ else }}system{{ end }}\n'
    "{{ .Content }}<|im_end|>\n",
    "<|im_start|>assistant\n",
)
_GEMMA_4_PARTS = ("<|turn>user\n", "<|turn>model\n")

FAMILIES: Dict[str, ChatFamily] = {
    "gemma-2": ChatFamily(GEMMA_2, *_PARTS, "<end_of_turn>", _go_first_user_gets_system(" ")),
    "gemma_chatml": ChatFamily(GEMMA_CHATML, "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>", _GO_CHATML),
    "gemma-3": ChatFamily(GEMMA_3, *_PARTS, "<end_of_turn>", _go_first_user_gets_system("\n\n")),
    # Gemma 3n renders text as Gemma 3 does; its image and audio placeholders differ (see `processor.py`).
    "gemma-3n": ChatFamily(GEMMA_3, *_PARTS, "<end_of_turn>", _go_first_user_gets_system("\n\n")),
    "gemma-4": ChatFamily(GEMMA_4, *_GEMMA_4_PARTS, "<turn|>", _GO_GEMMA_4),
    "gemma-4-thinking": ChatFamily(
        GEMMA_4_THINKING, *_GEMMA_4_PARTS, "<turn|>", _GO_GEMMA_4 + "<|channel>thought\n<channel|>"
    ),
    # Chosen by get_chat_template for any Gemma 4 name when the model's own template primes the empty channel.
    "gemma-4-thought-in-history": ChatFamily(
        GEMMA_4_THOUGHT_IN_HISTORY,
        *_GEMMA_4_PARTS,
        "<turn|>",
        '{{- range .Messages }}{{ if eq .Role "system" }}<|turn>system\n{{ .Content }}<turn|>\n'
        '{{ else if eq .Role "assistant" }}<|turn>model\n<|channel>thought\n<channel|>{{ .Content }}<turn|>\n'
        "{{ else }}<|turn>{{ .Role }}\n{{ .Content }}<turn|>\n{{ end }}{{ end }}"
        "<|turn>model\n<|channel>thought\n<channel|>",
    ),
}
GEMMA_4_NAMES = ("gemma-4", "gemma-4-thinking")

ALIASES: Dict[str, str] = {
    "gemma": "gemma-2",
    "gemma2": "gemma-2",
    "gemma2_chatml": "gemma_chatml",
    "gemma3": "gemma-3",
    "gemma3n": "gemma-3n",
    "gemma4": "gemma-4",
    "gemma4-thinking": "gemma-4-thinking",
}
