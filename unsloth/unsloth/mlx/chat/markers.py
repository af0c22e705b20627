# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The instruction and response markers `train_on_responses_only` needs, for any chat template.

The family table is the fast path. Otherwise a probe conversation with sentinel contents is rendered through the
tokenizer's own `apply_chat_template`: the text `add_generation_prompt=True` adds is the response marker, and the
text between an answer and the next question, less what also ends the last answer, is the instruction marker.
Standard library only; the tokenizer does the rendering.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

from .families import DEFAULT_INSTRUCTION_PART, DEFAULT_RESPONSE_PART, FAMILIES, family_of_template
from .families.base import BOS

QUESTIONS = ("UNSLOTHPROBEQUESTIONONE", "UNSLOTHPROBEQUESTIONTWO")
ANSWERS = ("UNSLOTHPROBEANSWERONE", "UNSLOTHPROBEANSWERTWO")
FAMILY_ATTRIBUTE = "unsloth_chat_family"


class Markers(NamedTuple):
    instruction_part: str
    response_part: str
    # How they were found, for error messages: "given", "family table 'chatml'", "chat template", "defaults".
    source: str


class MarkerProbeError(ValueError):
    """The chat template gave no usable markers; the message says what was tried."""


def _conversation(turns: int) -> List[dict]:
    messages = []
    for question, answer in list(zip(QUESTIONS, ANSWERS))[:turns]:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return messages


def _render(tokenizer: Any, messages: List[dict], add_generation_prompt: bool = False) -> str:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):
        raise MarkerProbeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not text")
    return text


def _common_prefix(first: str, second: str) -> str:
    size = 0
    while size < min(len(first), len(second)) and first[size] == second[size]:
        size += 1
    return first[:size]


def probe_markers(tokenizer: Any) -> Markers:
    """The markers read from the tokenizer's chat template; MarkerProbeError naming the step that failed."""
    try:
        full = _render(tokenizer, _conversation(2))
        last_answer_only = _render(tokenizer, _conversation(1))
        question = [{"role": "user", "content": QUESTIONS[0]}]
        asked, unasked = _render(tokenizer, question, True), _render(tokenizer, question)
    except MarkerProbeError:
        raise
    except Exception as error:
        raise MarkerProbeError(f"rendering a probe conversation through the chat template failed: {error!r}") from error
    if not all(sentinel in full for sentinel in (*QUESTIONS, *ANSWERS)):
        raise MarkerProbeError("the chat template does not render each turn's content as given")
    response = asked[len(unasked) :] if asked.startswith(unasked) else ""
    if not response.strip():
        # No generation prompt: the answer opener is what stands between a question and its answer.
        response = full[full.index(QUESTIONS[1]) + len(QUESTIONS[1]) : full.index(ANSWERS[1])]
    between = full[full.index(ANSWERS[0]) + len(ANSWERS[0]) : full.index(QUESTIONS[1])]
    answer_end = last_answer_only[last_answer_only.index(ANSWERS[0]) + len(ANSWERS[0]) :]
    instruction = between[len(_common_prefix(between, answer_end)) :].lstrip() or between.lstrip()
    if not instruction or not response.strip():
        raise MarkerProbeError(
            f"the rendered turns have no text between them (instruction {instruction!r}, response {response!r})"
        )
    return Markers(instruction, response.lstrip() or response, "chat template")


def find_markers(tokenizer: Any, instruction_part: Optional[str], response_part: Optional[str]) -> Markers:
    """Given markers as they are; a missing one from the family table, else the tokenizer's template, else the
    zephyr-style defaults when the tokenizer has no template at all."""
    if instruction_part is not None and response_part is not None:
        return Markers(instruction_part, response_part, "given")
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    name = getattr(tokenizer, FAMILY_ATTRIBUTE, None) or family_of_template(template)
    if name in FAMILIES:
        family = FAMILIES[name]
        # Llama 2 opens every instruction with the BOS, so its marker is written with `{bos}` in the table.
        bos = getattr(tokenizer, "bos_token", None) or ""
        instruction, response = (part.replace(BOS, bos) for part in (family.instruction_part, family.response_part))
        found = Markers(instruction, response, f"family table {name!r}")
    elif template:
        try:
            found = probe_markers(tokenizer)
        except MarkerProbeError as error:
            raise MarkerProbeError(
                "train_on_responses_only could not find the instruction and response markers: the chat template "
                f"matches no family of the table ({', '.join(FAMILIES)}), and reading it failed: {error}. "
                "Pass instruction_part= and response_part="
            ) from error
    else:
        found = Markers(
            DEFAULT_INSTRUCTION_PART, DEFAULT_RESPONSE_PART, "defaults (the tokenizer has no chat template)"
        )
    return Markers(
        found.instruction_part if instruction_part is None else instruction_part,
        found.response_part if response_part is None else response_part,
        found.source,
    )
