# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`get_chat_template`: give a tokenizer one of the families' chat formats, rendered by its `apply_chat_template`.

The formats live in `chat/families/`. A `mapping` (ShareGPT's from/value) and a default `system_message` are
handled by a short Jinja prologue in front of the family's own template, so the family's text is never rewritten.
With `map_eos_token=True` the family's end-of-turn marker becomes the tokenizer's EOS when the vocabulary holds it
as one token, so generation stops at the end of a turn; the rendered text is the family's either way.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional, Tuple, Union

from .families import FAMILIES, family_name, family_of_template
from .families.gemma import EMPTY_THOUGHT_CHANNEL, GEMMA_4_NAMES
from .parts import UNSEEN_BY_TEXT_MODELS
from .processor import is_processor, text_owner

logger = logging.getLogger(__name__)

DEFAULT_MAPPING = {"role": "role", "content": "content", "user": "user", "assistant": "assistant", "system": "system"}
# The tokenizer attribute naming the family applied, read by train_on_responses_only.
FAMILY_ATTRIBUTE = "unsloth_chat_family"
THOUGHT_IN_HISTORY = "gemma-4-thought-in-history"


def _mapping_prologue(mapping: Dict[str, str]) -> str:
    """Jinja that rewrites `messages` into role/content dicts with the standard role names."""
    roles = {mapping[role]: role for role in ("user", "assistant", "system")}
    role_key, content_key = json.dumps(mapping["role"]), json.dumps(mapping["content"])
    return (
        "{%- set roles = " + json.dumps(roles) + " -%}"
        "{%- set mapped = namespace(items=[]) -%}"
        "{%- for message in messages -%}"
        "{%- set mapped.items = mapped.items + [{'role': roles.get(message["
        + role_key
        + "], message["
        + role_key
        + "]),"
        " 'content': message[" + content_key + "]}] -%}"
        "{%- endfor -%}"
        "{%- set messages = mapped.items -%}"
    )


# What follows a part's type when it is refused: a vision model takes images only.
_UNSEEN_BY_PROCESSORS = "' was given; vision models on MLX take text and image parts only"


def _parts_prologue(image_text: Optional[str] = None) -> str:
    """Jinja joining a content given as a list of parts into its text; other keys of the message are kept.

    An image part becomes `image_text` when a vision processor's; any other part is refused naming its type."""
    image = (
        "{%- elif part['type'] == 'image' -%}{%- set text.value = text.value + " + json.dumps(image_text) + " -%}"
        if image_text
        else ""
    )
    unseen = _UNSEEN_BY_PROCESSORS if image_text else UNSEEN_BY_TEXT_MODELS
    return (
        "{%- set flat = namespace(items=[]) -%}"
        "{%- for message in messages -%}"
        "{%- if message['content'] is defined and message['content'] is not string and message['content'] is iterable"
        " and message['content'] is not mapping -%}"
        "{%- set text = namespace(value='') -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part is string -%}{%- set text.value = text.value + part -%}"
        "{%- elif part['type'] == 'text' -%}{%- set text.value = text.value + part['text'] -%}"
        + image
        + "{%- else -%}{{- raise_exception("
        + json.dumps("a content part of type '")
        + " ~ part['type'] ~ "
        + json.dumps(unseen)
        + ") -}}{%- endif -%}"
        "{%- endfor -%}"
        "{%- set flat.items = flat.items + [dict(message, content=text.value)] -%}"
        "{%- else -%}{%- set flat.items = flat.items + [message] -%}{%- endif -%}"
        "{%- endfor -%}"
        "{%- set messages = flat.items -%}"
    )


def _system_prologue(system_message: str) -> str:
    """Jinja that puts `system_message` first unless the conversation brings its own system turn."""
    turn = "{'role': 'system', 'content': " + json.dumps(system_message) + "}"
    return (
        "{%- if not messages or messages[0]['role'] != 'system' -%}"
        "{%- set messages = [" + turn + "] + messages -%}"
        "{%- endif -%}"
    )


def _single_token(tokenizer: Any, text: str) -> bool:
    vocabulary = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return text in vocabulary


def _map_eos(tokenizer: Any, stop_marker: Optional[str]) -> None:
    """Make `stop_marker` the EOS when the vocabulary already holds it; never adds tokens (the model's size is fixed)."""
    if stop_marker is None or getattr(tokenizer, "eos_token", None) == stop_marker:
        return
    if _single_token(tokenizer, stop_marker):
        tokenizer.eos_token = stop_marker
        return
    logger.info(
        "map_eos_token: %r is not one token of this tokenizer, so the EOS stays %r", stop_marker, tokenizer.eos_token
    )


# CUDA Unsloth renames Gemma's <start_of_turn> and <eos> to these, so each is one token; MLX keeps the vocabulary.
_RENAMED_BY_UPSTREAM = {"gemma_chatml": ("<|im_start|>", "<|im_end|>")}


def _warn_unrenamed(tokenizer: Any, name: Optional[str]) -> None:
    missing = [marker for marker in _RENAMED_BY_UPSTREAM.get(name or "", ()) if not _single_token(tokenizer, marker)]
    if missing:
        logger.warning(
            "get_chat_template(%r): %s are not tokens of this vocabulary, so each is written as several; CUDA "
            "Unsloth renames Gemma's <start_of_turn> and <eos> to them, which MLX does not (the vocabulary stays as "
            "the model was trained)",
            name,
            " and ".join(missing),
        )


def _is_gemma(tokenizer: Any) -> bool:
    return type(tokenizer).__name__.startswith("Gemma")


def _primes_empty_thought(*holders: Any) -> bool:
    """A Gemma 4 model's own template (not one of ours) writes an empty thought channel into its answers."""
    for holder in holders:
        template = getattr(holder, "chat_template", None)
        template = template.get("default") if isinstance(template, dict) else template
        if not isinstance(template, str):
            continue
        ours = family_of_template(template)
        if ours == THOUGHT_IN_HISTORY or (ours is None and any(text in template for text in EMPTY_THOUGHT_CHANNEL)):
            return True
    return False


def _template_and_stop(
    chat_template: Union[str, Tuple[str, str]], owner: Any, tokenizer: Any
) -> Tuple[str, Optional[str], Optional[str]]:
    """(jinja source, stop marker, family name) for a table name or a (template, eos_token) tuple, with CUDA
    Unsloth's substitutions for Gemma: its ChatML for "chatml", the thought channel in every answer for a Gemma 4
    model that expects it, and a BOS in front of a template that lacks one."""
    stop_marker: Optional[str]
    name: Optional[str]
    if isinstance(chat_template, (tuple, list)):
        if len(chat_template) != 2 or not all(isinstance(part, str) for part in chat_template):
            raise ValueError("a chat_template tuple must be (jinja_template, eos_token), two strings")
        template, stop_marker, name = chat_template[0], chat_template[1], None
    else:
        name = family_name("gemma_chatml" if chat_template == "chatml" and _is_gemma(tokenizer) else chat_template)
        if name in GEMMA_4_NAMES and _primes_empty_thought(owner, tokenizer):
            logger.warning(
                "get_chat_template: this Gemma 4 model's own template opens an empty thought channel in its answers, "
                "so %r does too: <|channel>thought, then <channel|>, before each answer without thinking",
                chat_template,
            )
            name = THOUGHT_IN_HISTORY
        template, stop_marker = FAMILIES[name].template, FAMILIES[name].stop_marker
    if _is_gemma(tokenizer) and not template.startswith(("{{- bos_token", "{{ bos_token", "{{bos_token")):
        # Gemma's losses are far higher without the BOS, so CUDA Unsloth puts one in front of any template.
        template = "{{- bos_token -}}" + template
    return template, stop_marker, name


def get_chat_template(
    tokenizer: Any,
    chat_template: Union[str, Tuple[str, str]] = "chatml",
    mapping: Optional[Dict[str, str]] = None,
    map_eos_token: bool = True,
    system_message: Optional[str] = None,
) -> Any:
    """Set `tokenizer.chat_template` to the named family's format (or a (template, eos_token) tuple); returns it.

    Given a vision processor, the format goes on the processor and its tokenizer, image parts as its placeholder.
    """
    owner = tokenizer
    text_tokenizer = owner.tokenizer if is_processor(owner) else owner
    template, stop_marker, name = _template_and_stop(chat_template, owner, text_tokenizer)
    tokenizer, image_text = text_owner(owner, name)
    _warn_unrenamed(tokenizer, name)
    full_mapping = {**DEFAULT_MAPPING, **(mapping or {})}
    prologue = "" if full_mapping == DEFAULT_MAPPING else _mapping_prologue(full_mapping)
    # A template the user wrote is stored as written and sees the messages as given, as Hugging Face renders it.
    prologue += _parts_prologue(image_text) if name is not None else ""
    if system_message is not None:
        prologue += _system_prologue(system_message)
    tokenizer.chat_template = prologue + template
    if map_eos_token:
        _map_eos(tokenizer, stop_marker)
    setattr(tokenizer, FAMILY_ATTRIBUTE, name)
    if owner is not tokenizer:
        owner.chat_template = tokenizer.chat_template
        setattr(owner, FAMILY_ATTRIBUTE, name)
    return owner
