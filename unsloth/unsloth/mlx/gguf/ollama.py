# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The Ollama `Modelfile` written beside a GGUF export: `FROM`, the chat template in Go's template language, stops.

Each family of the chat table (`chat/families.py`) has its template here, written against Ollama's `.Messages`
list with Go's built-in functions only, so `text/template` renders it as Ollama does. What Go cannot say, Jinja's
`trim` and Qwen 3's `<think>` splitting, is left out; the BOS token is llama.cpp's to add, not the template's.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..chat.families import FAMILIES, family_of_template

logger = logging.getLogger(__name__)

MODELFILE_NAME = "Modelfile"
# Where a Modelfile made by `apply_chat_template` (before any GGUF exists) names the file; the export fills it in.
FILE_LOCATION = "{__FILE_LOCATION__}"
# Written where the family's template ends an assistant turn with the tokenizer's EOS.
EOS = "{eos}"

_SYSTEM = '{{ range .Messages }}{{ if eq .Role "system" }}{{ .Content }}{{ end }}{{ end }}'
_NOT_SYSTEM = '{{ range .Messages }}{{ if ne .Role "system" }}'
_FIRST_IS_SYSTEM = '{{- if and .Messages (eq (index .Messages 0).Role "system") }}'
_SKIP_LEADING_SYSTEM = '{{ range $i, $m := .Messages }}{{ if not (and (eq $i 0) (eq $m.Role "system")) }}'
_GEMMA_ROLE = '{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}'
# The last system message, then a flag that is true until the first turn after it has been written.
_SYSTEM_AND_FIRST = (
    '{{- $system := "" }}{{ range .Messages }}{{ if eq .Role "system" }}{{ $system = .Content }}{{ end }}{{ end }}'
    "{{ $first := true }}"
)

_LLAMA_TURNS = "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
_LLAMA_PROMPT = "<|start_header_id|>assistant<|end_header_id|>\n\n"
_LLAMA_3_1 = (
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    + _SYSTEM
    + "<|eot_id|>"
    + _NOT_SYSTEM
    + _LLAMA_TURNS
    + "{{ end }}{{ end }}"
    + _LLAMA_PROMPT
)
_CHATML_TURN = "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
_CHATML_PROMPT = "<|im_start|>assistant\n"

TEMPLATES: Dict[str, str] = {
    "llama-3": "{{- range .Messages }}" + _LLAMA_TURNS + "{{ end }}" + _LLAMA_PROMPT,
    "llama-3.1": _LLAMA_3_1,
    "llama-3.2": _LLAMA_3_1,
    "llama-3.3": _LLAMA_3_1,
    "qwen-2.5": (
        _FIRST_IS_SYSTEM
        + "<|im_start|>system\n{{ (index .Messages 0).Content }}<|im_end|>\n{{ else }}"
        + "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        + "{{ end }}"
        + _SKIP_LEADING_SYSTEM
        + "<|im_start|>{{ $m.Role }}\n{{ $m.Content }}<|im_end|>\n{{ end }}{{ end }}"
        + _CHATML_PROMPT
    ),
    "qwen-3": "{{- range .Messages }}" + _CHATML_TURN + "{{ end }}" + _CHATML_PROMPT,
    "gemma-2": (
        "{{- range .Messages }}<start_of_turn>"
        + _GEMMA_ROLE
        + "\n{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n"
    ),
    "gemma-3": (
        _SYSTEM_AND_FIRST
        + _NOT_SYSTEM
        + "<start_of_turn>"
        + _GEMMA_ROLE
        + "\n{{ if $first }}{{ if $system }}{{ $system }}\n\n{{ end }}{{ end }}{{ .Content }}<end_of_turn>\n"
        + "{{ $first = false }}{{ end }}{{ end }}<start_of_turn>model\n"
    ),
    "phi-3": "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n",
    "phi-4": (
        "{{- range .Messages }}<|im_start|>{{ .Role }}<|im_sep|>{{ .Content }}<|im_end|>{{ end }}"
        "<|im_start|>assistant<|im_sep|>"
    ),
    "mistral": (
        _SYSTEM_AND_FIRST
        + _NOT_SYSTEM
        + '{{ if eq .Role "user" }}[INST] {{ if $first }}{{ if $system }}{{ $system }}\n\n{{ end }}{{ end }}'
        + "{{ .Content }} [/INST]{{ else }}{{ .Content }}"
        + EOS
        + "{{ end }}{{ $first = false }}{{ end }}{{ end }}"
    ),
    "chatml": "{{- range .Messages }}" + _CHATML_TURN + "{{ end }}" + _CHATML_PROMPT,
    "zephyr": "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}" + EOS + "\n{{ end }}<|assistant|>\n",
    "alpaca": (
        _FIRST_IS_SYSTEM
        + "{{ (index .Messages 0).Content }}\n\n{{ else }}"
        + "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        + "\n\n{{ end }}"
        + _SKIP_LEADING_SYSTEM
        + '{{ if eq $m.Role "user" }}### Instruction:\n{{ $m.Content }}\n\n'
        + "{{ else }}### Response:\n{{ $m.Content }}"
        + EOS
        + "\n\n{{ end }}{{ end }}{{ end }}### Response:\n"
    ),
    "vicuna": (
        _FIRST_IS_SYSTEM
        + "{{ (index .Messages 0).Content }} {{ else }}"
        + "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        + "detailed, and polite answers to the user's questions. {{ end }}"
        + _SKIP_LEADING_SYSTEM
        + '{{ if eq $m.Role "user" }}USER: {{ $m.Content }} {{ else }}ASSISTANT: {{ $m.Content }}'
        + EOS
        + "{{ end }}{{ end }}{{ end }}ASSISTANT:"
    ),
}


def ollama_template(family: str, eos_token: Optional[str]) -> str:
    """The family's Go template, with the tokenizer's EOS written where the family ends a turn with it."""
    return TEMPLATES[family].replace(EOS, eos_token or "")


def stop_tokens(family: Optional[str], eos_token: Optional[str]) -> List[str]:
    """The family's end-of-turn marker and the tokenizer's EOS, each once."""
    stops = [FAMILIES[family].stop_marker] if family else []
    return list(dict.fromkeys(stop for stop in [*stops, eos_token] if stop))


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_modelfile(gguf_name: str, tokenizer: Any, model_type: str = "this") -> str:
    """The Modelfile for `gguf_name` (a file beside it), from the tokenizer's chat template and EOS."""
    prepared = getattr(tokenizer, "_ollama_modelfile", None)
    if isinstance(prepared, str) and FILE_LOCATION in prepared:
        # The notebook's own prompt format (apply_chat_template) wins over the family table, as on CUDA.
        return prepared.replace(FILE_LOCATION, f"./{gguf_name}")
    eos_token = getattr(tokenizer, "eos_token", None)
    family = family_of_template(getattr(tokenizer, "chat_template", None))
    lines = [f"FROM ./{gguf_name}"]
    if family in TEMPLATES:
        lines.append(f'TEMPLATE """{ollama_template(family, eos_token)}"""')
    else:
        logger.warning(
            "no Ollama template is known for the chat template of this %s model (not one of the chat table's "
            "families: %s): the Modelfile has no TEMPLATE, so Ollama falls back to its own guess from the GGUF",
            model_type,
            ", ".join(TEMPLATES),
        )
    lines += [f"PARAMETER stop {_quoted(stop)}" for stop in stop_tokens(family, eos_token)]
    return "\n".join(lines) + "\n"
