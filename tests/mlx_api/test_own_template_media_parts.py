"""A text-only model whose OWN chat template writes a placeholder for an image or audio part (as Gemma 4's does):
`tokenizer.apply_chat_template` refuses the part by name instead of handing the model a placeholder it cannot fill
(the Gemma 4 E2B Text notebook's image and audio cells on a text load)."""

from __future__ import annotations

import pytest

# Written here in the manner of Gemma 4's template: each media part becomes a placeholder token.
PLACEHOLDER_TEMPLATE = (
    "{% for m in messages %}<|user|>\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% else %}<{{ part['type'] }}>{% endif %}{% endfor %}{% endif %}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
PARTS = {
    "image": {"type": "image", "image": "https://example.invalid/sloth.jpg"},
    "audio": {"type": "audio", "audio": "audio.mp3"},
    "video": {"type": "video", "video": "clip.mp4"},
}


@pytest.fixture
def own_template_tokenizer(load_public):
    _, tokenizer = load_public()
    tokenizer.chat_template = PLACEHOLDER_TEMPLATE
    return tokenizer


@pytest.mark.parametrize("kind", sorted(PARTS))
@pytest.mark.parametrize("tokenize", [False, True])
def test_a_media_part_is_refused_through_the_models_own_template(own_template_tokenizer, kind, tokenize) -> None:
    question = [PARTS[kind], {"type": "text", "text": "What is this about?"}]
    with pytest.raises(ValueError, match=rf"content part of type '{kind}' .*text-only model.*FastVisionModel"):
        own_template_tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=tokenize, add_generation_prompt=True
        )


def test_a_batch_of_conversations_is_checked_too(own_template_tokenizer) -> None:
    plain = [{"role": "user", "content": "Hello"}]
    with_audio = [{"role": "user", "content": [PARTS["audio"], {"type": "text", "text": "Hi"}]}]
    with pytest.raises(ValueError, match="content part of type 'audio'"):
        own_template_tokenizer.apply_chat_template([plain, with_audio], tokenize=False)


def test_text_parts_still_render_through_the_models_own_template(own_template_tokenizer) -> None:
    parts = [{"type": "text", "text": "Write a poem "}, {"type": "text", "text": "about sloths."}]
    rendered = own_template_tokenizer.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|user|>\nWrite a poem about sloths.<|eos|>\n<|assistant|>\n"
