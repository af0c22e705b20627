"""Messages whose `content` is a list of parts (`[{"type": "text", "text": ...}]`, as Gemma 3 notebooks write it)
render as the same text as plain strings, for every family in the table."""

from __future__ import annotations

import pytest

from .test_chat_families import CONVERSATION, EXPECTED, RENDER_KEYWORDS, family_tokenizer  # noqa: F401


def _as_parts(conversation: list) -> list:
    """Each turn's text split into two text parts, with an image part between them that text templates drop."""
    turns = []
    for message in conversation:
        text = message["content"]
        middle = len(text) // 2
        parts = [{"type": "text", "text": text[:middle]}, {"type": "image"}, {"type": "text", "text": text[middle:]}]
        turns.append({"role": message["role"], "content": parts})
    return turns


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_list_of_parts_renders_as_its_text(family_tokenizer, name) -> None:  # noqa: F811  (the imported fixture)
    tokenizer = family_tokenizer(name)
    rendered = tokenizer.apply_chat_template(_as_parts(CONVERSATION), tokenize=False, **RENDER_KEYWORDS.get(name, {}))
    assert rendered == EXPECTED[name][1]


def test_parts_and_sharegpt_mapping_together(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, "chatml", mapping={"role": "from", "content": "value", "user": "human"})
    turns = [{"from": "human", "value": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}]
    assert tokenizer.apply_chat_template(turns, tokenize=False) == "<|im_start|>user\nHi there<|im_end|>\n"


def test_a_string_content_and_extra_keys_are_left_alone(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, "qwen-3")
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "Sum?"}]},
        {"role": "assistant", "content": "Four.", "reasoning_content": "Two and two."},
    ]
    rendered = tokenizer.apply_chat_template(turns, tokenize=False)
    assert "<think>\nTwo and two.\n</think>\n\nFour." in rendered and "Sum?" in rendered
