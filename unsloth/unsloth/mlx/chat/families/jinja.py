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
    """Refuses a `tools=` list by name in a family whose upstream template ignores tools, so a tool declaration is
    never dropped from a prompt unseen."""
    return (
        "{%- if tools or custom_tools is defined and custom_tools or builtin_tools is defined and builtin_tools -%}"
        + refuse(
            f"unsloth's MLX {family} chat template renders no tools (CUDA Unsloth's ignores them); render tool use "
            "with the model's own template"
        )
        + "{%- endif -%}"
    )


ONLY_USER_AND_ASSISTANT = refuse("this chat format knows user and assistant turns after an optional system turn")
# Upstream's tool-using templates write nothing for any other role; ours names it instead.
ONLY_KNOWN_ROLES = refuse("this chat format knows system, user, assistant and tool turns")


def system_then_pairs(
    family: str, default_system: str, after_system: str, question: tuple, answer: tuple, prompt: str, bos: bool = True
) -> str:
    """A system text (the conversation's first system turn, else `default_system`) followed by question and answer
    turns, each `(opener, closer)` with `{eos}` in a closer standing for the tokenizer's EOS."""

    def closer(text: str) -> str:
        head, _, tail = text.partition("{eos}")
        return literal(head) + (" + eos_token + " + literal(tail) if "{eos}" in text else "")

    return (
        ("{{- bos_token -}}" if bos else "")
        + no_tools(family)
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
