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


# Gemma 4 writes tools, calls and results in its own notation: keys bare or quoted, strings between <|"|> marks.
_Q = "'<|\"|>'"
_TOOL_MACROS = (
    # `pairs` writes a mapping's items sorted by key, `value` any JSON value.
    "{%- macro pairs(mapping, quote_keys) -%}{%- for key, inner in mapping | dictsort -%}"
    "{{- (" + _Q + " ~ key ~ " + _Q + " if quote_keys else key) ~ ':' ~ value(inner, quote_keys) -}}"
    "{%- if not loop.last -%}{{- ',' -}}{%- endif -%}{%- endfor -%}{%- endmacro -%}"
    "{%- macro value(item, quote_keys=true) -%}"
    "{%- if item is none -%}{{- 'null' -}}"
    "{%- elif item is string -%}{{- " + _Q + " + item + " + _Q + " -}}"
    "{%- elif item is boolean -%}{{- 'true' if item else 'false' -}}"
    "{%- elif item is mapping -%}{{- '{' ~ pairs(item, quote_keys) ~ '}' -}}"
    "{%- elif item is sequence -%}{{- '[' -}}{%- for inner in item -%}{{- value(inner, quote_keys) -}}"
    "{%- if not loop.last -%}{{- ',' -}}{%- endif -%}{%- endfor -%}{{- ']' -}}"
    "{%- else -%}{{- item -}}{%- endif -%}{%- endmacro -%}"
    "{%- macro quoted(names) -%}{%- for name in names -%}{{- " + _Q + " ~ name ~ " + _Q + " -}}"
    "{%- if not loop.last -%}{{- ',' -}}{%- endif -%}{%- endfor -%}{%- endmacro -%}"
    # An array's `items` schema, each non-null key in order.
    "{%- macro array_items(items) -%}{%- set shown = namespace(any=false) -%}"
    "{%- for key, inner in items | dictsort -%}{%- if inner is not none -%}"
    "{%- if shown.any -%}{{- ',' -}}{%- endif -%}{%- set shown.any = true -%}"
    "{%- if key == 'properties' -%}{{- 'properties:{' ~ (properties(inner) if inner is mapping else '') ~ '}' -}}"
    "{%- elif key == 'required' -%}{{- 'required:[' ~ quoted(inner) ~ ']' -}}"
    "{%- elif key == 'type' -%}"
    "{{- 'type:' ~ value(inner | upper if inner is string else inner | map('upper') | list) -}}"
    "{%- else -%}{{- key ~ ':' ~ value(inner) -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}{%- endmacro -%}"
    # Each property's schema; `plain_only` (an object without `properties`) skips the schema's own keywords.
    "{%- macro properties(schema, plain_only=false) -%}{%- set shown = namespace(any=false) -%}"
    "{%- for key, spec in schema | dictsort -%}"
    "{%- if not plain_only or key not in ['description', 'type', 'properties', 'required', 'nullable'] -%}"
    "{%- if shown.any -%}{{- ',' -}}{%- endif -%}{%- set shown.any = true -%}"
    "{%- set kind = spec['type'] | upper -%}{%- set fields = namespace(list=[]) -%}"
    "{%- if spec['description'] -%}"
    "{%- set fields.list = fields.list + ['description:' ~ " + _Q + " ~ spec['description'] ~ " + _Q + "] -%}"
    "{%- endif -%}"
    "{%- if kind == 'STRING' and spec['enum'] -%}{%- set fields.list = fields.list + ['enum:' ~ value(spec['enum'])] -%}"
    "{%- elif kind == 'ARRAY' and spec['items'] is mapping and spec['items'] -%}"
    "{%- set fields.list = fields.list + ['items:{' ~ array_items(spec['items']) ~ '}'] -%}"
    "{%- endif -%}"
    "{%- if spec['nullable'] -%}{%- set fields.list = fields.list + ['nullable:true'] -%}{%- endif -%}"
    "{%- if kind == 'OBJECT' -%}"
    "{%- if spec['properties'] is defined and spec['properties'] is mapping -%}"
    "{%- set fields.list = fields.list + ['properties:{' ~ properties(spec['properties']) ~ '}'] -%}"
    "{%- elif spec is mapping -%}{%- set fields.list = fields.list + ['properties:{' ~ properties(spec, true) ~ '}'] -%}"
    "{%- endif -%}"
    "{%- if spec['required'] -%}{%- set fields.list = fields.list + ['required:[' ~ quoted(spec['required']) ~ ']'] -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{{- key ~ ':{' ~ (fields.list + ['type:' ~ " + _Q + " ~ kind ~ " + _Q + "]) | join(',') ~ '}' -}}"
    "{%- endif -%}{%- endfor -%}{%- endmacro -%}"
    "{%- macro declaration(tool) -%}{%- set function = tool['function'] -%}{%- set schema = function['parameters'] -%}"
    "{{- 'declaration:' ~ function['name'] ~ '{description:' ~ " + _Q + " ~ function['description'] ~ " + _Q + " -}}"
    "{%- if schema -%}{{- ',parameters:{' -}}"
    "{%- if schema['properties'] -%}{{- 'properties:{' ~ properties(schema['properties']) ~ '},' -}}{%- endif -%}"
    "{%- if schema['required'] -%}{{- 'required:[' ~ quoted(schema['required']) ~ '],' -}}{%- endif -%}"
    "{%- if schema['type'] -%}{{- 'type:' ~ " + _Q + " ~ schema['type'] | upper ~ " + _Q + " ~ '}' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- if 'response' in function -%}{%- set response = function['response'] -%}{{- ',response:{' -}}"
    "{%- if response['description'] -%}"
    "{{- 'description:' ~ " + _Q + " ~ response['description'] ~ " + _Q + " ~ ',' -}}"
    "{%- endif -%}"
    "{%- if response['type'] | upper == 'OBJECT' -%}{{- 'type:' ~ " + _Q + " ~ 'OBJECT' ~ " + _Q + " ~ '}' -}}"
    "{%- endif -%}"
    "{%- endif -%}{{- '}' -}}{%- endmacro -%}"
    "{%- macro result(name, response) -%}{{- '<|tool_response>response:' + name + '{' -}}"
    "{%- if response is mapping -%}{{- pairs(response, false) -}}"
    "{%- else -%}{{- 'value:' ~ value(response, false) -}}{%- endif -%}"
    "{{- '}<tool_response|>' -}}{%- endmacro -%}"
)

# Inside the message loop: a turn's tool calls, then the results that follow it (from `tool_responses`, else the
# tool turns after it, each named by its call's id or its own name). The turn stays open until they are given.
_TOOL_CALLS = (
    "{%- for call in turn.calls -%}{%- set function = call['function'] -%}"
    "{{- '<|tool_call>call:' + function['name'] + '{' -}}"
    "{%- if function['arguments'] is mapping -%}{{- pairs(function['arguments'], false) -}}"
    "{%- elif function['arguments'] is string -%}{%- set text = function['arguments'] | trim -%}"
    "{{- text[1:-1] if text[:1] == '{' and text[-1:] == '}' else function['arguments'] -}}"
    "{%- endif -%}"
    "{{- '}<tool_call|>' -}}"
    "{%- endfor -%}"
    "{%- set turn.answered = false -%}"
    "{%- for given in message.get('tool_responses') or [] -%}"
    "{{- result(given['name'] | default('unknown', true), given['response']) -}}{%- set turn.answered = true -%}"
    "{%- endfor -%}"
    "{%- set scan = namespace(stopped=false, next_role=none) -%}"
    "{%- for follow in conversation[here + 1:] -%}"
    "{%- if scan.stopped -%}"
    "{%- elif follow['role'] != 'tool' -%}{%- set scan.stopped = true -%}{%- set scan.next_role = follow['role'] -%}"
    "{%- elif not message.get('tool_responses') -%}"
    "{%- set source = namespace(name=follow.get('name') or 'unknown') -%}"
    "{%- for call in turn.calls -%}{%- if call.get('id') == follow.get('tool_call_id') -%}"
    "{%- set source.name = call['function']['name'] -%}{%- endif -%}{%- endfor -%}"
    "{{- result(source.name, follow.get('content')) -}}{%- set turn.answered = true -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


def _gemma_4(empty_thought_prompt: bool, thought_in_history: bool = False) -> str:
    """Gemma 4: `enable_thinking=True` opens the system turn with <|think|>; the thinking variant's generation
    prompt carries an empty thought channel when thinking is off. With `thought_in_history` (the larger Gemma 4
    models, whose own template primes that channel) every model turn opens its channel: with the turn's
    `reasoning` (or `reasoning_content`) after the last question, empty when thinking is off. Tools are declared
    in the system turn; a model turn with tool calls holds their results and goes on with the answer after them."""
    prompt = r"{{- '<|turn>model\n' -}}"
    history = ""
    if thought_in_history:
        history = (
            "{%- if role == 'model' -%}"
            "{%- set thought = message.get('reasoning') or message.get('reasoning_content') -%}"
            "{%- if thought and here > last.user -%}"
            r"{{- '<|channel>thought\n' + thought + '\n<channel|>' -}}"
            r"{%- elif not thinking and not continues -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}"
            "{%- endif -%}"
        )
    if empty_thought_prompt:
        prompt += r"{%- if not thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}"
    return (
        _VISIBLE + _TOOL_MACROS + "{%- set thinking = enable_thinking is defined and enable_thinking -%}"
        "{%- set first = namespace(skip=0) -%}"
        "{%- set has_system = messages[0]['role'] in ['system', 'developer'] -%}"
        "{%- if has_system or thinking or tools -%}"
        r"{{- '<|turn>system\n' -}}{%- if thinking -%}{{- '<|think|>\n' -}}{%- endif -%}"
        "{%- if has_system -%}{{- messages[0]['content'] | trim -}}{%- set first.skip = 1 -%}{%- endif -%}"
        "{%- for tool in tools or [] -%}{{- '<|tool>' + declaration(tool) | trim + '<tool|>' -}}{%- endfor -%}"
        r"{{- '<turn|>\n' -}}"
        "{%- endif -%}"
        "{%- set conversation = messages[first.skip:] -%}"
        "{%- set last = namespace(user=-1) -%}"
        "{%- for message in conversation -%}"
        "{%- if message['role'] == 'user' -%}{%- set last.user = loop.index0 -%}{%- endif -%}"
        "{%- endfor -%}"
        "{%- set turn = namespace(count=0, calls=false, answered=false) -%}"
        "{%- for message in conversation -%}{%- if message['role'] != 'tool' -%}{%- set here = loop.index0 -%}"
        # An answer after tool results continues the model turn that called them.
        "{%- set continues = message['role'] == 'assistant' and turn.calls -%}"
        "{%- if not continues and (message['role'] == 'user') != (turn.count is even) -%}"
        + jinja.refuse("Conversation roles must alternate user/assistant/user/assistant/...")
        + "{%- endif -%}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
        "{%- if not continues -%}{%- set turn.count = turn.count + 1 -%}"
        r"{{- '<|turn>' + role + '\n' -}}{%- endif -%}" + history + ""
        "{%- set turn.calls = message.get('tool_calls') -%}"
        "{%- if turn.calls -%}" + _TOOL_CALLS + "{%- endif -%}"
        "{%- if message['content'] is string -%}"
        "{%- set shown = visible(message['content']) if role == 'model' else message['content'] | trim -%}"
        "{%- elif turn.calls -%}{%- set shown = '' -%}"
        "{%- else -%}" + jinja.refuse("Invalid content type") + "{%- endif -%}"
        "{{- shown -}}"
        r"{%- if not turn.calls -%}{{- '<turn|>\n' -}}"
        "{%- elif not turn.answered -%}{{- '<|tool_response>' -}}"
        "{%- elif scan.next_role != 'assistant' and (shown | trim | length > 0 or scan.next_role) -%}"
        r"{{- '<turn|>\n' -}}{%- set turn.calls = false -%}"
        "{%- endif -%}"
        "{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{%- if not turn.calls -%}" + prompt + ""
        r"{%- elif turn.answered and thinking -%}{{- '<|channel>thought\n' -}}{%- endif -%}{%- endif -%}"
    )


GEMMA_4 = _gemma_4(False)
GEMMA_4_THINKING = _gemma_4(True)
GEMMA_4_THOUGHT_IN_HISTORY = _gemma_4(True, thought_in_history=True)
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
