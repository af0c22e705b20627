# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""gpt-oss's harmony format: a system header with today's date and the reasoning effort, a developer turn for the
system text, and each answer on the final channel (its `thinking` on the analysis channel when it is the last)."""

from __future__ import annotations

from typing import Dict

from . import jinja
from .base import ChatFamily

_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
_CHANNELS = "# Valid channels: analysis, commentary, final. Channel must be included for every message."


def _no_channel_tags(field: str) -> str:
    """Refuses harmony's channel tags written into a turn's `field`: they belong in `thinking` and `content`."""
    return (
        "{%- if message['" + field + "'] is string and ('<|channel|>analysis<|message|>' in message['" + field + "']"
        " or '<|channel|>final<|message|>' in message['"
        + field
        + "']) -%}"
        + jinja.refuse(
            f"the assistant turn's {field} holds <|channel|> tags; put the analysis text in 'thinking' and the final "
            "answer in 'content'"
        )
        + "{%- endif -%}"
    )


_ANALYSIS = "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message['thinking'] + '<|end|>' -}}"
_FINAL = "'<|start|>assistant<|channel|>final<|message|>' + message['content']"

GPT_OSS = (
    jinja.no_tools("gpt-oss", jinja.NOT_YET) + "{{- '<|start|>system<|message|>' -}}"
    "{{- (model_identity if model_identity is defined else " + jinja.literal(_IDENTITY) + r") + '\n' -}}"
    r"{{- 'Knowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\n\n' -}}"
    r"{{- 'Reasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') + '\n\n' -}}"
    "{{- " + jinja.literal(_CHANNELS + "<|end|>") + " -}}"
    "{%- set developer = namespace(text='', skip=0) -%}"
    "{%- if developer_instructions is defined and developer_instructions is not none -%}"
    "{%- set developer.text = developer_instructions -%}"
    "{%- elif messages[0]['role'] in ['developer', 'system'] -%}"
    "{%- set developer.text = messages[0]['content'] -%}{%- set developer.skip = 1 -%}"
    "{%- endif -%}"
    "{%- if developer.text -%}"
    r"{{- '<|start|>developer<|message|># Instructions\n\n' + developer.text + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- for message in messages[developer.skip:] -%}"
    + jinja.no_tool_turns("gpt-oss")
    + "{%- if message['role'] == 'user' -%}{{- '<|start|>user<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    + _no_channel_tags("content")
    + _no_channel_tags("thinking")
    + "{%- if loop.last and not add_generation_prompt -%}"
    # Only a training row's final answer keeps its reasoning, and ends with <|return|> for the model to learn.
    "{%- if message['thinking'] is string -%}" + _ANALYSIS + "{%- endif -%}"
    "{{- " + _FINAL + " + '<|return|>' -}}"
    "{%- elif message['thinking'] is string and message['content'] is not string -%}" + _ANALYSIS + ""
    "{%- else -%}{{- " + _FINAL + " + '<|end|>' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"
)

# Ollama's templates have `currentDate` for today's date, as the Jinja template's strftime_now.
_GO_GPT_OSS = (
    "<|start|>system<|message|>"
    + _IDENTITY
    + "\nKnowledge cutoff: 2024-06\nCurrent date: {{ currentDate }}\n\nReasoning: medium\n\n"
    + _CHANNELS
    + "<|end|>"
    + '{{- range $i, $m := .Messages }}{{ if and (eq $i 0) (eq $m.Role "system") }}'
    + "<|start|>developer<|message|># Instructions\n\n{{ $m.Content }}<|end|>"
    + '{{ else if eq $m.Role "user" }}<|start|>user<|message|>{{ $m.Content }}<|end|>'
    + '{{ else if eq $m.Role "assistant" }}<|start|>assistant<|channel|>final<|message|>{{ $m.Content }}<|end|>'
    + "{{ end }}{{ end }}<|start|>assistant"
)

FAMILIES: Dict[str, ChatFamily] = {
    "gpt-oss": ChatFamily(GPT_OSS, "<|start|>user", "<|start|>assistant", "<|return|>", _GO_GPT_OSS),
}

ALIASES: Dict[str, str] = {"gptoss": "gpt-oss"}
