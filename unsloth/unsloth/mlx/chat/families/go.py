# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Pieces of the families' Ollama templates, in Go's `text/template` over Ollama's `.Messages` list.

Each family's template renders what its Jinja template renders with `add_generation_prompt=True`, less the BOS
(llama.cpp adds it). `{eos}` and `{bos}` stand for the tokenizer's tokens, filled in when the Modelfile is written.
"""

from __future__ import annotations

from .base import BOS as BOS
from .base import EOS as EOS

SYSTEM = '{{ range .Messages }}{{ if eq .Role "system" }}{{ .Content }}{{ end }}{{ end }}'
NOT_SYSTEM = '{{ range .Messages }}{{ if ne .Role "system" }}'
FIRST_IS_SYSTEM = '{{- if and .Messages (eq (index .Messages 0).Role "system") }}'
FIRST_CONTENT = "{{ (index .Messages 0).Content }}"
SKIP_LEADING_SYSTEM = '{{ range $i, $m := .Messages }}{{ if not (and (eq $i 0) (eq $m.Role "system")) }}'
GEMMA_ROLE = '{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}'
# The last system message, then a flag that is true until the first turn after it has been written.
SYSTEM_AND_FIRST = (
    '{{- $system := "" }}{{ range .Messages }}{{ if eq .Role "system" }}{{ $system = .Content }}{{ end }}{{ end }}'
    "{{ $first := true }}"
)


def each_turn(turn: str, prompt: str) -> str:
    """Every message as `turn` (written against `.Role` and `.Content`), then the generation prompt."""
    return "{{- range .Messages }}" + turn + "{{ end }}" + prompt


def system_then_pairs(default_system: str, after_system: str, question: tuple, answer: tuple, prompt: str) -> str:
    """The Go twin of `jinja.system_then_pairs`."""
    return (
        FIRST_IS_SYSTEM
        + FIRST_CONTENT
        + "{{ else }}"
        + default_system
        + "{{ end }}"
        + after_system
        + SKIP_LEADING_SYSTEM
        + '{{ if eq $m.Role "user" }}'
        + question[0]
        + "{{ $m.Content }}"
        + question[1]
        + "{{ else }}"
        + answer[0]
        + "{{ $m.Content }}"
        + answer[1]
        + "{{ end }}{{ end }}{{ end }}"
        + prompt
    )
