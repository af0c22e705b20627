"""Every family of the chat table on a real tokenizer: `train_on_responses_only` keeps exactly the assistant's
tokens of each, and a few renderings written out by hand (the byte-for-byte comparison with CUDA Unsloth's own
templates, for every name, is `test_upstream_chat_templates.py`)."""

from __future__ import annotations

import pytest

from unsloth import UnslothTrainer
from unsloth.mlx.chat.families import FAMILIES

CONVERSATION = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
    {"role": "user", "content": "Where do bees carry pollen?"},
    {"role": "assistant", "content": "To the hive."},
    {"role": "user", "content": "How many herons wait?"},
    {"role": "assistant", "content": "Two herons wait."},
]
ANSWERS = [message["content"] for message in CONVERSATION if message["role"] == "assistant"]

# Each family's own BOS / EOS spelling, given to the tiny tokenizer so the rendered text is the family's.
SPECIAL = {
    "llama": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "sentencepiece": {"bos_token": "<s>", "eos_token": "</s>"},
}
FAMILY_SPECIAL = {
    **{name: SPECIAL["llama"] for name in ("llama-3", "llama-3.1")},
    **{name: SPECIAL["gemma"] for name in ("gemma-2", "gemma_chatml", "gemma-3", "gemma-3n", "gemma-4")},
    **{name: SPECIAL["sentencepiece"] for name in ("mistral", "llama", "zephyr", "alpaca", "vicuna", "unsloth")},
    "phi-3": {"eos_token": "<|endoftext|>"},
}

# What opens each answer and what closes it (the first of several that comes), as each format writes its turns:
# the loss must count the tokens from the opener's end to the closer's end, and nothing else.
_CHATML = ("<|im_start|>assistant\n", ("<|im_end|>",))
TURNS = {
    "llama-3": ("<|start_header_id|>assistant<|end_header_id|>\n\n", ("<|eot_id|>",)),
    "llama-3.1": ("<|start_header_id|>assistant<|end_header_id|>\n\n", ("<|eot_id|>",)),
    "chatml": _CHATML,
    "qwen-2.5": _CHATML,
    "qwen-3": _CHATML,
    "qwen3-instruct": _CHATML,
    "qwen3-thinking": _CHATML,
    "lfm-2": _CHATML,
    "yi-chat": _CHATML,
    "gemma_chatml": _CHATML,
    "phi-4": ("<|im_start|>assistant<|im_sep|>", ("<|im_end|>",)),
    "gemma-2": ("<start_of_turn>model\n", ("<end_of_turn>",)),
    "gemma-3": ("<start_of_turn>model\n", ("<end_of_turn>",)),
    "gemma-3n": ("<start_of_turn>model\n", ("<end_of_turn>",)),
    "gemma-4": ("<|turn>model\n", ("<turn|>",)),
    "gemma-4-thinking": ("<|turn>model\n", ("<turn|>",)),
    "gemma-4-thought-in-history": ("<|turn>model\n", ("<turn|>",)),
    "gpt-oss": ("<|start|>assistant", ("<|end|>", "<|return|>")),
    "phi-3": ("<|assistant|>\n", ("<|end|>",)),
    "zephyr": ("<|assistant|>\n", ("</s>",)),
    "mistral": ("[/INST]", ("</s>",)),
    "llama": ("[/INST]", ("</s>",)),
    "alpaca": ("### Response:\n", ("</s>",)),
    "vicuna": ("ASSISTANT:", ("</s>",)),
    "vicuna_old": ("### Assistant:", ("<|eos|>",)),
    "unsloth": (">>> Assistant:", ("</s>",)),
    "starling": ("GPT4 Correct Assistant:", ("<|end_of_turn|>",)),
}


@pytest.fixture
def family_tokenizer(load_public):
    def make(name: str):
        from unsloth.chat_templates import get_chat_template

        _, tokenizer = load_public()
        for attribute, value in FAMILY_SPECIAL.get(name, {}).items():
            setattr(tokenizer, attribute, value)
        return get_chat_template(tokenizer, name)

    return make


def _answer_spans(text: str, opener: str, closers: tuple) -> list:
    spans, position = [], 0
    for answer in ANSWERS:
        start = text.index(opener, position) + len(opener)
        assert answer in text[start:], (answer, text)
        end = min(text.index(closer, start) + len(closer) for closer in closers if closer in text[start:])
        spans.append((start, end))
        position = end
    return spans


def _expected_mask(tokenizer, text: str, spans: list) -> list:
    """True for each token whose first character lies in one of the spans."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [any(begin <= start < end for begin, end in spans) for start, _ in offsets]


def test_every_family_has_its_answer_turns_written_here():
    assert sorted(TURNS) == sorted(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_train_on_responses_only_keeps_exactly_the_assistant_tokens(family_tokenizer, load_public, quiet_args, name):
    from unsloth.chat_templates import train_on_responses_only

    tokenizer = family_tokenizer(name)
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    model, _ = load_public()
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1, max_seq_length=1024)
    )
    train_on_responses_only(trainer)  # the markers come from the family the tokenizer was given
    expected = _expected_mask(tokenizer, text, _answer_spans(text, *TURNS[name]))
    assert trainer.train_rows.masks[0].tolist() == expected
    assert sum(expected) > 0 and not all(expected)


def test_renderings_written_out_by_hand(family_tokenizer) -> None:
    system = [{"role": "system", "content": "Be brief."}, CONVERSATION[0]]
    llama = family_tokenizer("llama-3.1").apply_chat_template(system, tokenize=False)
    assert llama == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 July 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat colour is the kettle?<|eot_id|>"
    )
    gemma = family_tokenizer("gemma-3").apply_chat_template(system, tokenize=False, add_generation_prompt=True)
    assert (
        gemma
        == "<bos><start_of_turn>user\nBe brief.\n\nWhat colour is the kettle?<end_of_turn>\n<start_of_turn>model\n"
    )
    gemma = family_tokenizer("gemma-2").apply_chat_template(system, tokenize=False)
    assert gemma == "<bos><start_of_turn>user\nBe brief. What colour is the kettle?<end_of_turn>\n"
    qwen = family_tokenizer("qwen-2.5").apply_chat_template(CONVERSATION[:1], tokenize=False)
    assert qwen == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n"
    )
    mistral = family_tokenizer("mistral").apply_chat_template(system, tokenize=False)
    assert mistral == "<s>[INST] Be brief. What colour is the kettle? [/INST]"
    prompt = family_tokenizer("qwen-3").apply_chat_template(
        CONVERSATION[:1], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert prompt == (
        "<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    prompt = family_tokenizer("gemma-4-thinking").apply_chat_template(
        CONVERSATION[:1], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|turn>user\nWhat colour is the kettle?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    prompt = family_tokenizer("vicuna").apply_chat_template(
        CONVERSATION[:1], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("questions. USER: What colour is the kettle? ASSISTANT:") and prompt.startswith("<s>")


def test_a_name_outside_the_table_is_refused_listing_the_names(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    with pytest.raises(ValueError, match=r"chat_template='gemma-9' is not available; choose one of .*gemma-4"):
        get_chat_template(tokenizer, "gemma-9")


def test_tools_are_refused_by_name_not_dropped(family_tokenizer) -> None:
    tool = {"type": "function", "function": {"name": "kettle", "description": "Boil.", "parameters": {}}}
    # CUDA Unsloth's ChatML ignores tools; tool use itself is tested against upstream in test_upstream_chat_tools.py.
    with pytest.raises(Exception, match="MLX chatml chat template renders no tools"):
        family_tokenizer("chatml").apply_chat_template(CONVERSATION[:1], tools=[tool], tokenize=False)


def test_a_template_eos_tuple_and_eos_mapping(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    template = "{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}<|system|>{% endfor %}"
    # "<|system|>" is one token of the tiny vocabulary, so mapping makes it the EOS.
    tokenizer = get_chat_template(tokenizer, (template, "<|system|>"))
    assert tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False) == (
        "[user] What colour is the kettle?<|system|>[assistant] The kettle is red.<|system|>"
    )
    assert tokenizer.eos_token == "<|system|>"
    _, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, (template, "<|not-a-token|>"))
    assert tokenizer.eos_token == "<|eos|>"  # never added to a vocabulary the model's embedding must match
    with pytest.raises(ValueError, match=r"\(jinja_template, eos_token\)"):
        get_chat_template(tokenizer, ("only a template",))


def test_sharegpt_mapping_renders_from_and_value_turns(family_tokenizer, load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    mapping = {"role": "from", "content": "value", "user": "human", "assistant": "gpt"}
    tokenizer = get_chat_template(tokenizer, "llama-3", mapping=mapping)
    turns = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]
    assert tokenizer.apply_chat_template(turns, tokenize=False) == (
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        "Hello<|eot_id|>"
    )


def test_gemmas_chatml_names_the_token_renaming_it_does_not_do(caplog) -> None:
    from transformers import GemmaTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer
    from unsloth.chat_templates import get_chat_template

    tokenizer = GemmaTokenizerFast(tokenizer_object=build_tokenizer(), bos_token="<bos>", eos_token="<eos>")
    tokenizer = get_chat_template(tokenizer, "chatml")
    assert tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False) == (
        "<bos><|im_start|>user\nWhat colour is the kettle?<|im_end|>\n"
    )
    assert "<|im_start|> and <|im_end|> are not tokens of this vocabulary" in caplog.text
