# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Plain-text chat formats: Alpaca, Vicuna (v1.1 and the older "### Human"), Unsloth's own, Zephyr, Mistral
Instruct, Llama 2, Starling and Phi-3."""

from __future__ import annotations

from typing import Dict

from . import go, jinja
from .base import ChatFamily

_VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)
_VICUNA_OLD_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the human's questions."
)
_ALPACA_SYSTEM = (
    "Below are some instructions that describe some tasks. Write responses that appropriately complete each request."
)
_UNSLOTH_SYSTEM = "You are a helpful assistant to the user"

# (default system text, text after it, question opener and closer, answer opener and closer, generation prompt)
_PLAIN = {
    # The space after a colon belongs to the answer's first word in byte-level tokenizers, so it is not marked.
    "vicuna": (_VICUNA_SYSTEM, " ", ("USER: ", " "), ("ASSISTANT: ", "{eos}"), "ASSISTANT:", "USER:", "ASSISTANT:"),
    "vicuna_old": (
        _VICUNA_OLD_SYSTEM,
        "\n",
        ("### Human: ", "\n"),
        ("### Assistant: ", "{eos}\n"),
        "### Assistant:",
        "### Human:",
        "### Assistant:",
    ),
    "alpaca": (
        _ALPACA_SYSTEM,
        "\n\n",
        ("### Instruction:\n", "\n\n"),
        ("### Response:\n", "{eos}\n\n"),
        "### Response:\n",
        "### Instruction:\n",
        "### Response:\n",
    ),
    "unsloth": (
        _UNSLOTH_SYSTEM,
        "\n",
        (">>> User: ", "\n"),
        (">>> Assistant: ", "{eos}\n"),
        ">>> Assistant: ",
        ">>> User:",
        ">>> Assistant:",
    ),
}


def _plain(name: str) -> ChatFamily:
    system, after, question, answer, prompt, instruction_part, response_part = _PLAIN[name]
    return ChatFamily(
        jinja.system_then_pairs(name, system, after, question, answer, prompt),
        instruction_part,
        response_part,
        None,
        go.system_then_pairs(system, after, question, answer, prompt),
    )


ZEPHYR = (
    jinja.no_tools("zephyr") + "{%- for message in messages -%}"
    "{%- set tag = message['role'] if message['role'] in ['user', 'assistant'] else 'system' -%}"
    r"{{- '<|' + tag + '|>\n' + message['content'] + eos_token + '\n' -}}"
    "{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)

# Mistral Instruct has no system turn: the system text opens the first instruction, after one space.
MISTRAL = (
    "{{- bos_token -}}" + jinja.no_tools("mistral") + ""
    "{%- set first = namespace(prefix='', skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first.skip = 1 -%}"
    "{%- if messages[1]['role'] == 'user' -%}{%- set first.prefix = messages[0]['content'] + ' ' -%}"
    "{%- else -%}{{- '[INST] ' + messages[0]['content'] + ' [/INST]' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- for message in messages[first.skip:] -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '[INST] ' + (first.prefix if loop.first else '') + message['content'] + ' [/INST]' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- message['content'] + eos_token -}}"
    "{%- else -%}" + jinja.ONLY_USER_AND_ASSISTANT + "{%- endif -%}"
    "{%- endfor -%}"
)

# Llama 2 chat: a BOS before every instruction, the system text in <<SYS>> tags inside the first one.
LLAMA_2 = (
    jinja.no_tools("llama") + "{%- set first = namespace(prefix='', skip=0) -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first.skip = 1 -%}"
    "{%- if messages[1]['role'] == 'user' -%}"
    r"{%- set first.prefix = '<<SYS>>\n' + messages[0]['content'] + '\n<</SYS>>\n\n' -%}"
    "{%- else -%}{{- bos_token + '[INST] ' + messages[0]['content'] + ' [/INST]' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- for message in messages[first.skip:] -%}"
    "{%- if message['role'] == 'user' -%}"
    "{%- set text = message['content'] if loop.first and first.prefix else message['content'] | trim -%}"
    "{{- bos_token + '[INST] ' + (first.prefix if loop.first else '') + text + ' [/INST]' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- ' ' + message['content'] | trim + ' ' + eos_token -}}"
    "{%- else -%}" + jinja.ONLY_USER_AND_ASSISTANT + "{%- endif -%}"
    "{%- endfor -%}"
)

STARLING = (
    "{{- bos_token -}}" + jinja.no_tools("starling") + ""
    "{%- for message in messages -%}"
    "{{- 'GPT4 Correct ' + message['role'] | capitalize + ': ' + message['content'] + '<|end_of_turn|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'GPT4 Correct Assistant:' -}}{%- endif -%}"
)

PHI_3 = (
    jinja.no_tools("phi-3") + "{%- for message in messages -%}"
    r"{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}"
    "{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)

_FIRST_USER_GETS_SYSTEM = go.SYSTEM_AND_FIRST + go.NOT_SYSTEM + '{{ if eq .Role "user" }}'

FAMILIES: Dict[str, ChatFamily] = {
    **{name: _plain(name) for name in _PLAIN},
    "zephyr": ChatFamily(
        ZEPHYR,
        "<|user|>\n",
        "<|assistant|>\n",
        None,
        go.each_turn("<|{{ .Role }}|>\n{{ .Content }}" + go.EOS + "\n", "<|assistant|>\n"),
    ),
    "mistral": ChatFamily(
        MISTRAL,
        "[INST]",
        "[/INST]",
        None,
        _FIRST_USER_GETS_SYSTEM
        + "[INST] {{ if $first }}{{ if $system }}{{ $system }} {{ end }}{{ end }}{{ .Content }} [/INST]"
        + "{{ else }}{{ .Content }}"
        + go.EOS
        + "{{ end }}{{ $first = false }}{{ end }}{{ end }}",
    ),
    # Every instruction opens with the BOS, so the marker carries it: the answer stops before the next one.
    "llama": ChatFamily(
        LLAMA_2,
        go.BOS + "[INST]",
        "[/INST]",
        None,
        _FIRST_USER_GETS_SYSTEM
        + "{{ if not $first }}"
        + go.BOS
        + "{{ end }}[INST] {{ if $first }}{{ if $system }}<<SYS>>\n{{ $system }}\n<</SYS>>\n\n{{ end }}{{ end }}"
        + "{{ .Content }} [/INST]{{ else }} {{ .Content }} "
        + go.EOS
        + "{{ end }}{{ $first = false }}{{ end }}{{ end }}",
    ),
    "starling": ChatFamily(
        STARLING,
        "GPT4 Correct User:",
        "GPT4 Correct Assistant:",
        "<|end_of_turn|>",
        go.each_turn(
            'GPT4 Correct {{ if eq .Role "user" }}User{{ else if eq .Role "assistant" }}Assistant{{ else }}System'
            "{{ end }}: {{ .Content }}<|end_of_turn|>",
            "GPT4 Correct Assistant:",
        ),
    ),
    "phi-3": ChatFamily(
        PHI_3,
        "<|user|>\n",
        "<|assistant|>\n",
        "<|end|>",
        go.each_turn("<|{{ .Role }}|>\n{{ .Content }}<|end|>\n", "<|assistant|>\n"),
    ),
}

ALIASES: Dict[str, str] = {"vicuna old": "vicuna_old", "phi-35": "phi-3", "phi-3.5": "phi-3", "phi3": "phi-3"}
