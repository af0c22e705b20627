"""Messages whose `content` is a list of parts (`[{"type": "text", "text": ...}]`, as Gemma notebooks write it):
text parts render as the same text as plain strings, for every family in the table; an image, audio or video part
sent to a text-only model is refused naming the part, at the chat template and at `model.generate`, rather than
rendered as text the model answers from alone."""

from __future__ import annotations

import pytest

from unsloth.mlx.chat.families import FAMILIES

from .test_chat_families import CONVERSATION, family_tokenizer  # noqa: F401

# The Gemma 4 text notebook's multimodal cell, sent to a model loaded for text.
GEMMA_4_NOTEBOOK = {
    "image": {"type": "image", "image": "https://example.invalid/bee.jpg"},
    "audio": {"type": "audio", "audio": "audio.mp3"},
    "video": {"type": "video", "video": "clip.mp4"},
}


def _as_parts(conversation: list) -> list:
    """Each turn's text split into two text parts."""
    turns = []
    for message in conversation:
        text = message["content"]
        middle = len(text) // 2
        parts = [{"type": "text", "text": text[:middle]}, {"type": "text", "text": text[middle:]}]
        turns.append({"role": message["role"], "content": parts})
    return turns


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_list_of_text_parts_renders_as_its_text(family_tokenizer, name) -> None:  # noqa: F811  (the imported fixture)
    tokenizer = family_tokenizer(name)
    as_strings = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert tokenizer.apply_chat_template(_as_parts(CONVERSATION), tokenize=False) == as_strings


@pytest.mark.parametrize("kind", sorted(GEMMA_4_NOTEBOOK))
@pytest.mark.parametrize("name", ["gemma-4", "gemma-3", "chatml"])
def test_a_media_part_sent_to_a_text_model_is_refused_by_name(family_tokenizer, name, kind) -> None:  # noqa: F811
    tokenizer = family_tokenizer(name)
    question = [GEMMA_4_NOTEBOOK[kind], {"type": "text", "text": "What is this?"}]
    with pytest.raises(Exception, match=rf"content part of type '{kind}' .*text-only model.*FastVisionModel"):
        tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False)


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


@pytest.mark.parametrize("keyword", ["pixel_values", "input_features", "pixel_values_videos"])
def test_generate_on_a_text_model_refuses_image_audio_and_video_inputs(load_public, keyword) -> None:
    model, tokenizer = load_public()
    inputs = tokenizer("What is this?", return_tensors="np")
    with pytest.raises(ValueError, match=rf"{keyword}.*text-only model.*FastVisionModel"):
        model.generate(**inputs, **{keyword: [[0.0]]}, max_new_tokens=2)
