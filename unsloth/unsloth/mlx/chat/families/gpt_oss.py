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
_TO_FUNCTIONS = "\nCalls to these tools must go to the commentary channel: 'functions'."


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

# The built-in tools' descriptions the model was trained with, named by `builtin_tools=["browser", "python"]`.
_BROWSER = (
    "## browser\n\n// Tool for browsing.\n"
    "// The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
    "// Cite information from the tool using the following format:\n"
    "// `【{cursor}†L{line_start}(-L{line_end})?】`, for example: `【6†L9-L11】` or `【8†L3】`.\n"
    "// Do not quote more than 10 words directly from the tool output.\n"
    "// sources=web (default: web)\nnamespace browser {\n\n"
    "// Searches for information related to `query` and displays `topn` results.\n"
    "type search = (_: {\nquery: string,\ntopn?: number, // default: 10\nsource?: string,\n}) => any;\n\n"
    "// Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing "
    "`num_lines` lines.\n"
    "// Valid link ids are displayed with the formatting: `【{id}†.*】`.\n"
    "// If `cursor` is not provided, the most recent page is implied.\n"
    "// If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
    "// If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered on "
    "the most relevant passage, if available.\n"
    "// Use this function without `id` to scroll to a new location of an opened page.\n"
    "type open = (_: {\nid?: number | string, // default: -1\ncursor?: number, // default: -1\n"
    "loc?: number, // default: -1\nnum_lines?: number, // default: -1\nview_source?: boolean, // default: false\n"
    "source?: string,\n}) => any;\n\n"
    "// Finds exact matches of `pattern` in the current page, or the page given by `cursor`.\n"
    "type find = (_: {\npattern: string,\ncursor?: number, // default: -1\n}) => any;\n\n"
    "} // namespace browser\n\n"
)
_PYTHON = (
    "## python\n\nUse this tool to execute Python code in your chain of thought. The code will not be shown to the "
    "user. This tool should be used for internal reasoning, but not for code that is intended to be visible to the "
    "user (e.g. when creating plots, tables, or files).\n\n"
    "When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook "
    "environment. python will respond with the output of the execution or time out after 120.0 seconds. The drive "
    "at '/mnt/data' can be used to save and persist user files. Internet access for this session is UNKNOWN. "
    "Depends on the cluster.\n\n"
)
_BUILTIN_TOOLS = (
    "{%- if builtin_tools is defined and builtin_tools is not none -%}{{- '# Tools\\n\\n' -}}"
    "{%- if 'browser' in builtin_tools -%}{{- " + jinja.literal(_BROWSER) + " -}}{%- endif -%}"
    "{%- if 'python' in builtin_tools -%}{{- " + jinja.literal(_PYTHON) + " -}}{%- endif -%}"
    "{%- endif -%}"
)

# A JSON schema as the TypeScript type harmony declares functions with. An object's property types start on a line
# of their own after 16 spaces, and a oneOf variant's default after 20, as upstream's template writes them.
_TYPESCRIPT = (
    "{%- macro ts_type(spec) -%}"
    "{%- set kind = spec['type'] -%}"
    "{%- if kind == 'array' -%}"
    "{%- set items = spec['items'] -%}"
    "{%- set simple = {'string': 'string[]', 'number': 'number[]', 'integer': 'number[]', 'boolean': 'boolean[]'} -%}"
    "{%- if not items -%}{{- 'any[]' -}}"
    "{%- elif items['type'] is string and items['type'] in simple -%}{{- simple[items['type']] -}}"
    "{%- else -%}{%- set inner = ts_type(items) -%}"
    "{{- 'any[]' if inner == 'object | object' or inner | length > 50 else inner + '[]' -}}"
    "{%- endif -%}"
    "{%- if spec['nullable'] -%}{{- ' | null' -}}{%- endif -%}"
    "{%- elif kind is defined and kind is iterable and kind is not string and kind is not mapping"
    " and kind[0] is defined -%}{{- kind | join(' | ') -}}"
    "{%- elif spec['oneOf'] -%}"
    "{%- for variant in spec['oneOf'] -%}{{- ts_type(variant) -}}"
    "{%- if variant['description'] -%}{{- '// ' + variant['description'] -}}{%- endif -%}"
    "{%- if variant['default'] is defined -%}{{- ' ' * 20 + '// default: ' + variant['default'] | tojson -}}"
    "{%- endif -%}"
    "{%- if not loop.last -%}{{- ' | \\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- elif kind == 'string' -%}"
    "{%- if spec['enum'] -%}{{- '\"' + spec['enum'] | join('\" | \"') + '\"' -}}"
    "{%- else -%}{{- 'string' + (' | null' if spec['nullable'] else '') -}}{%- endif -%}"
    "{%- elif kind in ['number', 'integer'] -%}{{- 'number' -}}"
    "{%- elif kind == 'boolean' -%}{{- 'boolean' -}}"
    "{%- elif kind == 'object' -%}"
    "{%- if spec['properties'] -%}{{- '{\\n' -}}"
    "{%- for name, inner in spec['properties'].items() -%}"
    "{{- name + ('' if name in (spec['required'] or []) else '?') + ': \\n' + ' ' * 16 + ts_type(inner) -}}"
    "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}{{- '}' -}}"
    "{%- else -%}{{- 'object' -}}{%- endif -%}"
    "{%- else -%}{{- 'any' -}}{%- endif -%}"
    "{%- endmacro -%}"
)
# The `functions` namespace: each tool a commented TypeScript function type over its parameters.
_FUNCTIONS = (
    "{{- '# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n' -}}"
    "{%- for tool in tools -%}{%- set function = tool['function'] -%}"
    "{{- '// ' + function['description'] + '\\ntype ' + function['name'] + ' = ' -}}"
    "{%- set schema = function['parameters'] -%}"
    "{%- if schema and schema['properties'] -%}{{- '(_: {\\n' -}}"
    "{%- for name, spec in schema['properties'].items() -%}"
    "{%- if spec['description'] -%}{{- '// ' + spec['description'] + '\\n' -}}{%- endif -%}"
    "{{- name + ('' if name in (schema['required'] or []) else '?') + ': ' + ts_type(spec) -}}"
    "{%- if spec['default'] is defined -%}"
    "{%- if spec['enum'] -%}{{- ', // default: ' + spec['default'] -}}"
    "{%- elif spec['oneOf'] -%}{{- '// default: ' + spec['default'] -}}"
    "{%- else -%}{{- ', // default: ' + spec['default'] | tojson -}}{%- endif -%}"
    "{%- endif -%}"
    "{{- ',\\n' -}}"
    "{%- endfor -%}{{- '}) => any;\\n\\n' -}}"
    "{%- else -%}{{- '() => any;\\n\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '} // namespace functions' -}}"
)
# Inside the message loop: an assistant turn's tool call on the commentary channel, after its text as analysis
# unless a final answer follows later. Harmony holds one call per turn; a second is refused rather than dropped.
_TOOL_CALL = (
    "{%- set answered = namespace(later=false) -%}"
    "{%- for later in conversation[loop.index:] -%}"
    "{%- if later['role'] == 'assistant' and 'tool_calls' not in later -%}{%- set answered.later = true -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if message['tool_calls'] | length > 1 -%}"
    + jinja.refuse("unsloth's MLX gpt-oss chat template renders one tool call per assistant turn, as harmony does")
    + "{%- endif -%}"
    "{%- set call = message['tool_calls'][0] -%}{%- set call = call['function'] if call['function'] else call -%}"
    "{%- if message['content'] and message['thinking'] -%}"
    + jinja.refuse(
        "Cannot pass both content and thinking in an assistant message with tool calls! Put the analysis message in "
        "one or the other, but not both."
    )
    + "{%- elif not answered.later and (message['content'] or message['thinking']) -%}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + (message['content'] or message['thinking']) + '<|end|>' -}}"
    "{%- endif -%}"
    "{{- '<|start|>assistant to=functions.' + call['name'] + '<|channel|>commentary ' -}}"
    "{{- (call['content_type'] if call['content_type'] is defined else 'json') + '<|message|>' -}}"
    "{{- (call['arguments'] if call['arguments'] is string else call['arguments'] | tojson) + '<|call|>' -}}"
    "{%- set last_call.name = call['name'] -%}"
)
_TOOL_RESULT = (
    "{%- if last_call.name is none -%}"
    + jinja.refuse("Message has tool role, but there was no previous assistant message with a tool call!")
    + "{%- endif -%}"
    "{{- '<|start|>functions.' + last_call.name + ' to=assistant<|channel|>commentary<|message|>' -}}"
    "{{- (message['content'] if message['content'] is string else message['content'] | tojson) + '<|end|>' -}}"
)

GPT_OSS = (
    _TYPESCRIPT + "{{- '<|start|>system<|message|>' -}}"
    "{{- (model_identity if model_identity is defined else " + jinja.literal(_IDENTITY) + r") + '\n' -}}"
    r"{{- 'Knowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\n\n' -}}"
    r"{{- 'Reasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') + '\n\n' -}}"
    + _BUILTIN_TOOLS
    + "{{- "
    + jinja.literal(_CHANNELS)
    + " -}}{%- if tools -%}{{- "
    + jinja.literal(_TO_FUNCTIONS)
    + " -}}{%- endif -%}{{- '<|end|>' -}}"
    "{%- set developer = namespace(text='', skip=0) -%}"
    "{%- if developer_instructions is defined and developer_instructions is not none -%}"
    "{%- set developer.text = developer_instructions -%}"
    "{%- elif messages[0]['role'] in ['developer', 'system'] -%}"
    "{%- set developer.text = messages[0]['content'] -%}{%- set developer.skip = 1 -%}"
    "{%- endif -%}"
    "{%- if developer.text or tools -%}{{- '<|start|>developer<|message|>' -}}"
    r"{%- if developer.text -%}{{- '# Instructions\n\n' + developer.text -}}{%- endif -%}"
    r"{%- if tools -%}{%- if developer.text -%}{{- '\n\n' -}}{%- endif -%}" + _FUNCTIONS + "{%- endif -%}"
    "{{- '<|end|>' -}}"
    "{%- endif -%}"
    "{%- set conversation = messages[developer.skip:] -%}"
    # The function a tool result answers: the last call's, as harmony's tool turns do not name it.
    "{%- set last_call = namespace(name=none) -%}"
    "{%- for message in conversation -%}"
    "{%- if message['role'] == 'user' -%}{{- '<|start|>user<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- elif message['role'] == 'tool' -%}" + _TOOL_RESULT + ""
    "{%- elif message['role'] == 'assistant' -%}"
    + _no_channel_tags("content")
    + _no_channel_tags("thinking")
    + "{%- if 'tool_calls' in message -%}"
    + _TOOL_CALL
    + "{%- elif loop.last and not add_generation_prompt -%}"
    # Only a training row's final answer keeps its reasoning, and ends with <|return|> for the model to learn.
    "{%- if message['thinking'] is string -%}" + _ANALYSIS + "{%- endif -%}"
    "{{- " + _FINAL + " + '<|return|>' -}}"
    "{%- elif message['thinking'] is string and message['content'] is not string -%}"
    + _ANALYSIS
    + "{%- set last_call.name = none -%}"
    "{%- else -%}{{- " + _FINAL + " + '<|end|>' -}}{%- set last_call.name = none -%}{%- endif -%}"
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
