"""Tool use through our chat templates, byte for byte as upstream's own Jinja: a `tools=` list (two functions, one
with nested parameters), assistant `tool_calls` (arguments as a dict and as a JSON string, two calls in one turn),
tool results, then the answer; with and without a system turn and a generation prompt. Which names render tools is
read from upstream's templates: a name whose render with tools differs from its render without must render as
upstream (`RENDERS_TOOLS`); every other name's upstream template ignores tools, and ours refuses them by name."""

from __future__ import annotations

import pytest

from .test_upstream_chat_templates import KEYWORDS, NAMES, SYSTEM, TABLE, _render, _tokenizer
from tools.kits.upstream_chat_table import upstream_template

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city's name."},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                    "day": {"oneOf": [{"type": "string", "description": "A date."}, {"type": "integer", "default": 0}]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_table",
            "description": "Book a table at a restaurant.",
            "parameters": {
                "type": "object",
                "properties": {
                    "restaurant": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "address": {"type": "object", "properties": {"street": {"type": "string"}}},
                        },
                    },
                    "guests": {"type": "integer", "description": "How many people."},
                    "dishes": {"type": "array", "items": {"type": "string"}, "nullable": True},
                },
                "required": ["restaurant", "guests"],
            },
        },
    },
]
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


def _called(arguments) -> list:
    """A question, a tool call with `arguments`, its result, the answer, then a second question."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "get_weather", "content": '{"temperature": 21}'},
        {"role": "assistant", "content": "It is 21 degrees in Paris."},
        {"role": "user", "content": "Book a table for two at Chez Marie."},
    ]


CALLED = _called({"city": "Paris", "unit": "celsius"})
BOOKING = {"restaurant": {"name": "Chez Marie", "address": {"street": "Rue Cler"}}, "guests": 2}
# Text before two calls in one turn, then their two results in a row, each naming its call's id.
TWO_CALLS = [
    *CALLED[-1:],
    {
        "role": "assistant",
        "content": "Checking both.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "book_table", "arguments": BOOKING}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"booked": true}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"temperature": 21}'},
    {"role": "assistant", "content": "Booked, and it is 21 degrees."},
]
CONVERSATIONS = {
    "asking": [QUESTION],
    "called": CALLED,
    "called, answered": CALLED[:-1],
    "called with a JSON string": _called('{"city": "Paris", "unit": "celsius"}'),
    "two calls": TWO_CALLS,
}
CONVERSATIONS.update({f"system, {label}": SYSTEM + messages for label, messages in CONVERSATIONS.items()})

# Derived from upstream's templates by `_upstream_renders_tools`, and checked against it below.
RENDERS_TOOLS = {
    "gemma-4",
    "gemma-4-thinking",
    "gemma4",
    "gemma4-thinking",
    "gpt-oss",
    "gptoss",
    *("llama-3.1", "llama-31", "llama-3.2", "llama-32", "llama-3.3", "llama-33"),
    *("qwen-2.5", "qwen2.5", "qwen-25", "qwen25", "qwen-2.5-coder", "qwen2.5-coder", "qwen-25-coder", "qwen25-coder"),
    *("qwen-3", "qwen3", "qwen3-instruct", "qwen3-thinking"),
}


# Llama 3.1's own keywords: its tools in the system turn, and its built-in tools (one of them called here); gpt-oss's
# built-in browser and python.
TOOL_KEYWORDS = [
    *KEYWORDS,
    {"tools_in_user_message": False},
    {"builtin_tools": ["brave_search", "get_weather"]},
    {"builtin_tools": ["browser", "python"]},
]


# Where upstream's template drops what ours refuses by name: gpt-oss writes only the first of two calls in a turn.
REFUSED_NOT_DROPPED = {"gpt-oss": ("two calls", "system, two calls"), "gptoss": ("two calls", "system, two calls")}


def _upstream(name: str):
    tokenizer = _tokenizer()
    tokenizer.chat_template = upstream_template(name)
    return tokenizer


def _upstream_renders_tools(name: str) -> bool:
    upstream = _upstream(name)
    with_tools = _render(upstream, [QUESTION], True, {"tools": TOOLS})
    return with_tools != _render(upstream, [QUESTION], True, {})


def _all_renderings(tokenizer) -> dict:
    return {
        (label, prompt, str(keywords)): _render(tokenizer, messages, prompt, {"tools": TOOLS, **keywords})
        for label, messages in CONVERSATIONS.items()
        for prompt in (False, True)
        for keywords in TOOL_KEYWORDS
    }


def test_the_names_that_render_tools_are_read_from_upstream():
    assert {name for name in NAMES if _upstream_renders_tools(name)} == RENDERS_TOOLS
    assert len(TABLE.templates) == 51


@pytest.mark.parametrize("name", sorted(RENDERS_TOOLS))
def test_our_template_renders_tool_use_as_upstreams(name):
    from unsloth.chat_templates import get_chat_template

    expected = _all_renderings(_upstream(name))
    assert sum(text.startswith("raised") for text in expected.values()) < len(expected) / 2, expected
    for case in [case for case in expected if case[0] in REFUSED_NOT_DROPPED.get(name, ())]:
        assert not expected[case].startswith("raised")
        expected[case] = "raised TemplateError"
    rendered = _all_renderings(get_chat_template(_tokenizer(), name))
    assert {case: text for case, text in rendered.items() if text != expected[case]} == {}


@pytest.mark.parametrize("name", sorted(set(NAMES) - RENDERS_TOOLS))
def test_a_name_whose_upstream_template_ignores_tools_refuses_them_by_name(name):
    from unsloth.chat_templates import get_chat_template

    ours = get_chat_template(_tokenizer(), name)
    with pytest.raises(Exception, match="chat template renders no tools"):
        ours.apply_chat_template([QUESTION], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    # Without tools the conversation renders as before.
    assert ours.apply_chat_template([QUESTION], tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("name", ["qwen-2.5", "qwen-3", "qwen3-instruct", "qwen3-thinking"])
def test_responses_only_trains_on_tool_calls_and_answers_not_on_tool_results(name):
    from unsloth.chat_templates import get_chat_template
    from unsloth.mlx.chat.families import response_parts
    from unsloth.mlx.chat.responses_only import response_spans

    text = _render(get_chat_template(_tokenizer(), name), SYSTEM + TWO_CALLS, False, {"tools": TOOLS})
    trained = "".join(text[begin:end] for begin, end in response_spans(text, *response_parts(name)))
    assert '{"name": "book_table"' in trained and "Booked, and it is 21 degrees." in trained
    assert "<tool_response>" not in trained and "<tools>" not in trained and "Chez Marie." not in trained


def test_a_gemma_4_model_priming_an_empty_thought_renders_tool_use_as_upstreams():
    from unsloth.chat_templates import get_chat_template

    upstream = _tokenizer()
    upstream.chat_template = TABLE.namespace["gemma4_empty_thought_template"]
    tokenizer = _tokenizer()
    # The model's own template writes the empty thought channel into its answers.
    tokenizer.chat_template = "{%- for message in messages -%}{{ '<|channel>thought\\n<channel|>' }}{%- endfor -%}"
    ours = get_chat_template(tokenizer, "gemma-4")
    assert _all_renderings(ours) == _all_renderings(upstream)
