# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Jinja pieces several families share: literals, refusals of what our templates do not render, and one shape."""

from __future__ import annotations

import json


def literal(text: str) -> str:
    """`text` as a Jinja string literal."""
    return json.dumps(text)


def refuse(problem: str) -> str:
    return "{{- raise_exception(" + literal(problem) + ") -}}"


def no_tools(family: str) -> str:
    """Refuses a `tools=` list: our template for `family` renders conversations, not tool declarations."""
    return (
        "{%- if tools or custom_tools is defined and custom_tools or builtin_tools is defined and builtin_tools -%}"
        + refuse(
            f"unsloth's MLX {family} chat template renders no tools; render tool use with the model's own template"
        )
        + "{%- endif -%}"
    )


def no_tool_turns(family: str) -> str:
    """Inside the message loop: refuses tool calls and tool results by name."""
    return (
        "{%- if message['role'] in ['tool', 'ipython'] or message['tool_calls'] -%}"
        + refuse(
            f"unsloth's MLX {family} chat template renders no tool calls or tool turns; "
            "render tool use with the model's own template"
        )
        + "{%- endif -%}"
    )


ONLY_USER_AND_ASSISTANT = refuse("this chat format knows user and assistant turns after an optional system turn")


def system_then_pairs(
    default_system: str, after_system: str, question: tuple, answer: tuple, prompt: str, bos: bool = True
) -> str:
    """A system text (the conversation's first system turn, else `default_system`) followed by question and answer
    turns, each `(opener, closer)` with `{eos}` in a closer standing for the tokenizer's EOS."""

    def closer(text: str) -> str:
        head, _, tail = text.partition("{eos}")
        return literal(head) + (" + eos_token + " + literal(tail) if "{eos}" in text else "")

    return (
        ("{{- bos_token -}}" if bos else "")
        + "{%- set system = namespace(text="
        + literal(default_system)
        + ", skip=0) -%}"
        "{%- if messages[0]['role'] == 'system' -%}"
        "{%- set system.text = messages[0]['content'] -%}{%- set system.skip = 1 -%}{%- endif -%}"
        "{{- system.text + " + literal(after_system) + " -}}"
        "{%- for message in messages[system.skip:] -%}"
        "{%- if message['role'] == 'user' -%}"
        "{{- " + literal(question[0]) + " + message['content'] + " + closer(question[1]) + " -}}"
        "{%- elif message['role'] == 'assistant' -%}"
        "{{- " + literal(answer[0]) + " + message['content'] + " + closer(answer[1]) + " -}}"
        "{%- else -%}" + ONLY_USER_AND_ASSISTANT + "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- " + literal(prompt) + " -}}{%- endif -%}"
    )
