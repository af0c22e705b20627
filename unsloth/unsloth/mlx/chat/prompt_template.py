# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The dataset-level `apply_chat_template` of the Ollama notebooks: a prompt written with `{SYSTEM}`, `{INPUT}`
and `{OUTPUT}` becomes the tokenizer's Jinja chat template, and each conversation a `text` row rendered by it.

The prompt shows one or two input/output examples. The text between `{INPUT}` and `{OUTPUT}` opens an answer;
what follows the last `{OUTPUT}` closes it (the EOS is added when it does not); the instruction marker is what
precedes each `{INPUT}`, read from between the two examples, or from the last paragraph when only one is given.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import unsloth_num_proc

INPUT, OUTPUT, SYSTEM = "{INPUT}", "{OUTPUT}", "{SYSTEM}"
# CUDA Unsloth's default prompt: Llama 3's turns, shown twice.
DEFAULT_PROMPT = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{SYSTEM}<|eot_id|>" + 2 * (
    "<|start_header_id|>user<|end_header_id|>\n\n{INPUT}<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{OUTPUT}<|eot_id|>"
)
DEFAULT_SYSTEM_MESSAGE = (
    "Below are some instructions that describe some tasks. Write responses that appropriately complete each request."
)


class PromptParts(NamedTuple):
    system: str  # the text before the first instruction, `{SYSTEM}` still in it when the prompt has one
    instruction: str
    response: str
    output_end: str


def _usage(problem: str) -> ValueError:
    return ValueError(
        f"chat_template {problem}: write one or two examples of {INPUT} and {OUTPUT}, each {INPUT} before its "
        f"{OUTPUT}, with an optional {SYSTEM} before them"
    )


def _common_suffix(first: str, second: str) -> str:
    size = 0
    while size < min(len(first), len(second)) and first[-1 - size] == second[-1 - size]:
        size += 1
    return first[len(first) - size :]


def split_prompt(prompt: str) -> PromptParts:
    """The system text, instruction marker, response marker and answer end of a `{INPUT}`/`{OUTPUT}` prompt."""
    count = prompt.count(INPUT)
    if count not in (1, 2) or prompt.count(OUTPUT) != count:
        raise _usage(f"has {count} {INPUT} and {prompt.count(OUTPUT)} {OUTPUT}")
    first_input = prompt.index(INPUT)
    first_output = prompt.find(OUTPUT, first_input)
    if first_output < 0:
        raise _usage(f"has {OUTPUT} before {INPUT}")
    response = prompt[first_input + len(INPUT) : first_output]
    before = prompt[:first_input]
    if count == 2:
        second_input = prompt.index(INPUT, first_output)
        second_output = prompt.find(OUTPUT, second_input)
        if second_output < 0 or prompt[second_input + len(INPUT) : second_output] != response:
            raise _usage("has two examples whose text between input and output differs")
        output_end = prompt[second_output + len(OUTPUT) :]
        between = prompt[first_output + len(OUTPUT) : second_input]
        if not between.startswith(output_end):
            raise _usage(f"ends its first answer with {between!r} but its last with {output_end!r}")
        instruction = _common_suffix(before, between[len(output_end) :])
    else:
        output_end = prompt[first_output + len(OUTPUT) :]
        # With one example, the instruction marker is the prompt's last paragraph (or line) before the input.
        cut = max(before.rfind("\n\n") + 2 if "\n\n" in before else -1, before.rfind(SYSTEM) + len(SYSTEM))
        instruction = before[cut:] if cut > 0 else before
    system = before[: len(before) - len(instruction)]
    if INPUT in system or OUTPUT in system:
        raise _usage("has text it cannot split into system, instruction and response parts")
    return PromptParts(system, instruction, response, output_end)


def _literal(text: str) -> str:
    return json.dumps(text)


def jinja_template(parts: PromptParts, default_system_message: Optional[str]) -> str:
    """The Jinja chat template for role/content conversations in the prompt's format."""
    default = _literal(default_system_message or "")
    head, _, tail = parts.system.partition(SYSTEM)
    system = _literal(head) + (" + system_message + " + _literal(tail) if SYSTEM in parts.system else "")
    return (
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- set system_message = messages[0]['content'] -%}{%- set loop_messages = messages[1:] -%}"
        "{%- else -%}{%- set system_message = " + default + " -%}{%- set loop_messages = messages -%}{%- endif -%}"
        "{{- " + system + " -}}"
        "{%- for message in loop_messages -%}"
        "{%- if message['role'] == 'user' -%}{{- " + _literal(parts.instruction) + " + message['content'] -}}"
        "{%- elif message['role'] == 'assistant' -%}"
        "{{- " + _literal(parts.response) + " + message['content'] + " + _literal(parts.output_end) + " -}}"
        "{%- else -%}{{- raise_exception('this template knows user and assistant turns after an optional system') -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- " + _literal(parts.response) + " -}}{%- endif -%}"
    )


def ollama_modelfile(parts: PromptParts, default_system_message: Optional[str], stops: Sequence[str]) -> str:
    """The Ollama Modelfile for the same format (Go template), with `{__FILE_LOCATION__}` for the GGUF's path."""
    system = parts.system
    if SYSTEM in system:
        system = "{{ if .System }}" + system.replace(SYSTEM, "{{ .System }}") + "{{ end }}"
    template = (
        system
        + "{{ if .Prompt }}"
        + parts.instruction
        + "{{ .Prompt }}{{ end }}"
        + parts.response
        + "{{ .Response }}"
        + parts.output_end
    )
    lines = ["FROM {__FILE_LOCATION__}", "", f'TEMPLATE """{template}"""', ""]
    lines += [f"PARAMETER stop {json.dumps(stop)}" for stop in dict.fromkeys(stops)]
    # CUDA Unsloth's sampling defaults for these Modelfiles.
    lines += ["PARAMETER temperature 1.5", "PARAMETER min_p 0.1"]
    if SYSTEM in parts.system and default_system_message:
        lines.append(f"SYSTEM {json.dumps(default_system_message)}")
    return "\n".join(lines) + "\n"


def _with_eos(parts: PromptParts, eos_tokens: Sequence[str]) -> PromptParts:
    """The answer end carries an EOS, so a trained model learns to stop (CUDA Unsloth adds it the same way)."""
    if not eos_tokens or any(token in parts.output_end for token in eos_tokens):
        return parts
    return parts._replace(output_end=eos_tokens[0] + parts.output_end)


class _RenderText:
    """Each conversation rendered by the tokenizer's new template; a class so `datasets` can pickle it."""

    def __init__(self, tokenizer: Any, column: str) -> None:
        self.tokenizer = tokenizer
        self.column = column

    def __call__(self, batch: Dict[str, list]) -> Dict[str, List[str]]:
        return {
            "text": [
                self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=False)
                for turns in batch[self.column]
            ]
        }


def apply_chat_template(
    dataset: Any,
    tokenizer: Any = None,
    chat_template: str = DEFAULT_PROMPT,
    default_system_message: Optional[str] = DEFAULT_SYSTEM_MESSAGE,
    extra_eos_tokens: Optional[Sequence[str] | str] = None,
    num_proc: Any = None,
) -> Any:
    """Set `tokenizer.chat_template` from the prompt (and `tokenizer._ollama_modelfile` to the matching Ollama
    Modelfile), and add a `text` column rendering each `conversations` row."""
    from .sharegpt import _conversation_column

    if tokenizer is None:
        raise ValueError("apply_chat_template needs tokenizer=, the tokenizer whose chat template it sets")
    extra = [extra_eos_tokens] if isinstance(extra_eos_tokens, str) else list(extra_eos_tokens or [])
    vocabulary = tokenizer.get_vocab()
    missing = [token for token in extra if token not in vocabulary]
    if missing:
        raise ValueError(f"extra_eos_tokens {missing} are not single tokens of this tokenizer")
    eos = [token for token in [getattr(tokenizer, "eos_token", None), *extra] if token]
    parts = _with_eos(split_prompt(chat_template), eos)
    template = jinja_template(parts, default_system_message)
    modelfile = ollama_modelfile(parts, default_system_message, eos)
    column = _conversation_column(dataset)
    for owner in (tokenizer, getattr(tokenizer, "tokenizer", None)):
        if owner is not None:
            owner.chat_template = template
            owner._ollama_modelfile = modelfile
    return unsloth_num_proc.sized_map(dataset, _RenderText(tokenizer, column), num_proc, batched=True)
