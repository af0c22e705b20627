"""Every name of CUDA Unsloth's chat template table (read from the pinned wheel, never imported) is accepted by our
`get_chat_template`, and our template renders byte for byte what upstream's own Jinja template renders, through a
real `transformers` fast tokenizer: with and without a system turn, with and without a generation prompt, and with
the thinking fields each thinking template reads. A name upstream adds is a failing row here."""

from __future__ import annotations

import pytest

from tools.kits.tokenizer_kit import build_tokenizer
from tools.kits.upstream_chat_table import run_data_statements, upstream_chat_table, upstream_template

TABLE = upstream_chat_table()
NAMES = sorted(TABLE.templates)
WITH_DEFAULT_SYSTEM = sorted(name for name, text in TABLE.default_system_messages.items() if text is not None)

PAIRS = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
    {"role": "user", "content": "Where do bees carry pollen?"},
    {"role": "assistant", "content": "To the hive."},
    {"role": "user", "content": "How many herons wait?"},
    {"role": "assistant", "content": "Two herons wait."},
]
SYSTEM = [{"role": "system", "content": "Answer in one short sentence."}]
# Reasoning as each thinking template reads it: Qwen's reasoning_content or a <think> head, gpt-oss's thinking,
# Gemma 4's thought channel inside the answer.
THINKING = [
    {"role": "user", "content": "What is two and two?"},
    {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nFour.", "thinking": "Add them."},
    {"role": "user", "content": "And three and three?"},
    {
        "role": "assistant",
        "content": "<|channel>thought\nDouble three.<channel|>Six.",
        "reasoning_content": "Double three.",
        "thinking": "Double three.",
    },
]
CONVERSATIONS = {
    "pairs": PAIRS,
    "pairs, asking": PAIRS[:-1],
    "system": SYSTEM + PAIRS,
    "system, asking": SYSTEM + PAIRS[:-1],
    "thinking": THINKING,
    "thinking, asking": THINKING[:-1],
    "system, thinking": SYSTEM + THINKING,
}
KEYWORDS = [
    {},
    {"enable_thinking": False},
    {"enable_thinking": True},
    {"reasoning_effort": "high", "developer_instructions": "Be terse.", "model_identity": "You are a kettle."},
]


def _tokenizer(kind: str = "PreTrainedTokenizerFast"):
    import transformers

    tokenizer_class = getattr(transformers, kind)
    return tokenizer_class(tokenizer_object=build_tokenizer(), bos_token="<|bos|>", eos_token="<|eos|>")


def _render(tokenizer, messages: list, add_generation_prompt: bool, keywords: dict) -> str:
    """The rendered text, or the name of the error the template raised."""
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **keywords
        )
    except Exception as error:  # a template's raise_exception and Jinja's own errors alike
        return f"raised {type(error).__name__}"


def _all_renderings(tokenizer) -> dict:
    return {
        (label, prompt, str(keywords)): _render(tokenizer, messages, prompt, keywords)
        for label, messages in CONVERSATIONS.items()
        for prompt in (False, True)
        for keywords in KEYWORDS
    }


def test_the_kit_reads_every_name_of_upstreams_table():
    assert len(NAMES) == 51, NAMES
    assert {"chatml", "gemma-4-thinking", "gpt-oss", "vicuna old", "qwen25-coder", "lfm-2.5", "yi-chat"} <= set(NAMES)
    assert all(isinstance(entry[0], str) and "messages" in entry[0] for entry in TABLE.templates.values())
    assert TABLE.default_system_messages["qwen-2.5"].startswith("You are Qwen")
    # The placeholder upstream's get_chat_template fills is filled here too.
    assert "{system_message}" in TABLE.templates["alpaca"][0] and "{system_message}" not in upstream_template("alpaca")


def test_the_kit_runs_only_data_statements_with_no_builtins():
    source = "import os\nA = 'x'\nB = open('/etc/hostname').read()\nC = A + 'y'\nos.remove('/nonexistent')\n"
    namespace: dict = {}
    skipped = run_data_statements(source, namespace)
    assert (namespace["A"], namespace["C"], "B" in namespace, "os" in namespace) == ("x", "xy", False, False)
    assert skipped == ["B = open('/etc/hostname').read()"]


@pytest.mark.parametrize("name", NAMES)
def test_our_template_renders_as_upstreams(name):
    from unsloth.chat_templates import get_chat_template

    upstream = _tokenizer()
    upstream.chat_template = upstream_template(name)
    ours = get_chat_template(_tokenizer(), name)
    expected = _all_renderings(upstream)
    assert sum(text.startswith("raised") for text in expected.values()) < len(expected) / 2, expected
    rendered = _all_renderings(ours)
    assert {case: text for case, text in rendered.items() if text != expected[case]} == {}


@pytest.mark.parametrize("name", WITH_DEFAULT_SYSTEM)
def test_a_system_message_replaces_the_default_as_upstreams_does(name):
    from unsloth.chat_templates import get_chat_template

    upstream = _tokenizer()
    upstream.chat_template = upstream_template(name, "Reply like a 'pirate'.")
    ours = get_chat_template(_tokenizer(), name, system_message="Reply like a 'pirate'.")
    for messages in (PAIRS, SYSTEM + PAIRS):
        assert _render(ours, messages, True, {}) == _render(upstream, messages, True, {})


@pytest.mark.parametrize("name", ["chatml", "gemma-4", "gemma-4-thinking", "llama", "qwen3-thinking", "alpaca"])
def test_on_a_gemma_tokenizer_chatml_is_gemmas_and_every_template_starts_with_the_bos(name):
    from unsloth.chat_templates import get_chat_template

    upstream = _tokenizer("GemmaTokenizerFast")
    upstream.chat_template = upstream_template(name, gemma_tokenizer=True)
    ours = get_chat_template(_tokenizer("GemmaTokenizerFast"), name)
    expected = _all_renderings(upstream)
    assert all(text.startswith("<|bos|>") for text in expected.values() if not text.startswith("raised"))
    assert _all_renderings(ours) == expected


@pytest.mark.parametrize("name", ["gemma-4", "gemma4", "gemma-4-thinking", "gemma4-thinking"])
def test_a_gemma_4_model_whose_template_primes_an_empty_thought_gets_it_in_every_answer(name, caplog):
    from unsloth.chat_templates import get_chat_template

    # The larger Gemma 4 checkpoints' own templates write this channel into answers without thinking.
    own = "{%- for message in messages -%}{{ '<|channel>thought\\n<channel|>' + message['content'] }}{%- endfor -%}"
    upstream = _tokenizer()
    upstream.chat_template = TABLE.namespace["gemma4_empty_thought_template"]
    tokenizer = _tokenizer()
    tokenizer.chat_template = own
    ours = get_chat_template(tokenizer, name)
    assert _all_renderings(ours) == _all_renderings(upstream)
    assert "empty thought channel" in caplog.text
    # Asked again on the tokenizer now holding our template, the choice stays.
    assert get_chat_template(ours, name).chat_template == ours.chat_template


@pytest.mark.parametrize("entry_point", ["unsloth", "unsloth.chat_templates", "unsloth.mlx"])
def test_every_entry_point_accepts_every_upstream_name(entry_point):
    import importlib

    get_chat_template = importlib.import_module(entry_point).get_chat_template
    refused = []
    for name in NAMES:
        try:
            get_chat_template(_tokenizer(), name)
        except ValueError:
            refused.append(name)
    assert refused == []
