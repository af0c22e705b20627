"""Every chat format notebooks name, rendered through `apply_chat_template`, against the family's published text
written out by hand; and `train_on_responses_only` keeping exactly the assistant's tokens of each."""

from __future__ import annotations

import time

import pytest

from unsloth import UnslothTrainer

CONVERSATION = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
    {"role": "user", "content": "Where do bees carry pollen?"},
    {"role": "assistant", "content": "To the hive."},
    {"role": "user", "content": "How many herons wait?"},
    {"role": "assistant", "content": "Two herons wait."},
]

# Each family's own BOS / EOS spelling, given to the tiny tokenizer so the rendered text is the family's.
SPECIAL = {
    "llama": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "sentencepiece": {"bos_token": "<s>", "eos_token": "</s>"},
    "phi-3": {"eos_token": "<|endoftext|>"},
}

LLAMA_TURNS = (
    "<|start_header_id|>user<|end_header_id|>\n\nWhat colour is the kettle?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nThe kettle is red.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhere do bees carry pollen?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nTo the hive.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHow many herons wait?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nTwo herons wait.<|eot_id|>"
)
LLAMA_SYSTEM = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
)
LLAMA_ANSWERS = ["The kettle is red.<|eot_id|>", "To the hive.<|eot_id|>", "Two herons wait.<|eot_id|>"]

CHATML_TURNS = (
    "<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n"
    "<|im_start|>assistant\nThe kettle is red.<|im_end|>\n"
    "<|im_start|>user\nWhere do bees carry pollen?<|im_end|>\n"
    "<|im_start|>assistant\nTo the hive.<|im_end|>\n"
    "<|im_start|>user\nHow many herons wait?<|im_end|>\n"
    "<|im_start|>assistant\nTwo herons wait.<|im_end|>\n"
)
CHATML_ANSWERS = ["The kettle is red.<|im_end|>\n", "To the hive.<|im_end|>\n", "Two herons wait.<|im_end|>\n"]

GEMMA = (
    "<bos><start_of_turn>user\nWhat colour is the kettle?<end_of_turn>\n"
    "<start_of_turn>model\nThe kettle is red.<end_of_turn>\n"
    "<start_of_turn>user\nWhere do bees carry pollen?<end_of_turn>\n"
    "<start_of_turn>model\nTo the hive.<end_of_turn>\n"
    "<start_of_turn>user\nHow many herons wait?<end_of_turn>\n"
    "<start_of_turn>model\nTwo herons wait.<end_of_turn>\n"
)
GEMMA_ANSWERS = ["The kettle is red.<end_of_turn>\n", "To the hive.<end_of_turn>\n", "Two herons wait.<end_of_turn>\n"]

# name: (special tokens, the published rendering, the text of each assistant turn the loss must keep)
EXPECTED = {
    "llama-3": (SPECIAL["llama"], "<|begin_of_text|>" + LLAMA_TURNS, LLAMA_ANSWERS),
    "llama-3.1": (SPECIAL["llama"], LLAMA_SYSTEM + LLAMA_TURNS, LLAMA_ANSWERS),
    "llama-3.2": (SPECIAL["llama"], LLAMA_SYSTEM + LLAMA_TURNS, LLAMA_ANSWERS),
    "llama-3.3": (SPECIAL["llama"], LLAMA_SYSTEM + LLAMA_TURNS, LLAMA_ANSWERS),
    "qwen-2.5": (
        {},
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        + CHATML_TURNS,
        CHATML_ANSWERS,
    ),
    "qwen-3": (
        {},
        "<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n"
        "<|im_start|>assistant\nThe kettle is red.<|im_end|>\n"
        "<|im_start|>user\nWhere do bees carry pollen?<|im_end|>\n"
        "<|im_start|>assistant\nTo the hive.<|im_end|>\n"
        "<|im_start|>user\nHow many herons wait?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nTwo herons wait.<|im_end|>\n",
        [
            "The kettle is red.<|im_end|>\n",
            "To the hive.<|im_end|>\n",
            "<think>\n\n</think>\n\nTwo herons wait.<|im_end|>\n",
        ],
    ),
    "gemma-2": (SPECIAL["gemma"], GEMMA, GEMMA_ANSWERS),
    "gemma-3": (SPECIAL["gemma"], GEMMA, GEMMA_ANSWERS),
    "phi-3": (
        SPECIAL["phi-3"],
        "<|user|>\nWhat colour is the kettle?<|end|>\n"
        "<|assistant|>\nThe kettle is red.<|end|>\n"
        "<|user|>\nWhere do bees carry pollen?<|end|>\n"
        "<|assistant|>\nTo the hive.<|end|>\n"
        "<|user|>\nHow many herons wait?<|end|>\n"
        "<|assistant|>\nTwo herons wait.<|end|>\n<|endoftext|>",
        ["The kettle is red.<|end|>\n", "To the hive.<|end|>\n", "Two herons wait.<|end|>\n<|endoftext|>"],
    ),
    "phi-4": (
        {},
        "<|im_start|>user<|im_sep|>What colour is the kettle?<|im_end|>"
        "<|im_start|>assistant<|im_sep|>The kettle is red.<|im_end|>"
        "<|im_start|>user<|im_sep|>Where do bees carry pollen?<|im_end|>"
        "<|im_start|>assistant<|im_sep|>To the hive.<|im_end|>"
        "<|im_start|>user<|im_sep|>How many herons wait?<|im_end|>"
        "<|im_start|>assistant<|im_sep|>Two herons wait.<|im_end|>",
        ["The kettle is red.<|im_end|>", "To the hive.<|im_end|>", "Two herons wait.<|im_end|>"],
    ),
    "mistral": (
        SPECIAL["sentencepiece"],
        "<s>[INST] What colour is the kettle? [/INST]The kettle is red.</s>"
        "[INST] Where do bees carry pollen? [/INST]To the hive.</s>"
        "[INST] How many herons wait? [/INST]Two herons wait.</s>",
        ["The kettle is red.</s>", "To the hive.</s>", "Two herons wait.</s>"],
    ),
    "chatml": ({}, CHATML_TURNS, CHATML_ANSWERS),
    "zephyr": (
        SPECIAL["sentencepiece"],
        "<|user|>\nWhat colour is the kettle?</s>\n"
        "<|assistant|>\nThe kettle is red.</s>\n"
        "<|user|>\nWhere do bees carry pollen?</s>\n"
        "<|assistant|>\nTo the hive.</s>\n"
        "<|user|>\nHow many herons wait?</s>\n"
        "<|assistant|>\nTwo herons wait.</s>\n",
        ["The kettle is red.</s>\n", "To the hive.</s>\n", "Two herons wait.</s>\n"],
    ),
    "alpaca": (
        SPECIAL["sentencepiece"],
        "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        "\n\n### Instruction:\nWhat colour is the kettle?\n\n### Response:\nThe kettle is red.</s>\n\n"
        "### Instruction:\nWhere do bees carry pollen?\n\n### Response:\nTo the hive.</s>\n\n"
        "### Instruction:\nHow many herons wait?\n\n### Response:\nTwo herons wait.</s>\n\n",
        ["The kettle is red.</s>\n\n", "To the hive.</s>\n\n", "Two herons wait.</s>\n\n"],
    ),
    "vicuna": (
        SPECIAL["sentencepiece"],
        "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the user's questions. "
        "USER: What colour is the kettle? ASSISTANT: The kettle is red.</s>"
        "USER: Where do bees carry pollen? ASSISTANT: To the hive.</s>"
        "USER: How many herons wait? ASSISTANT: Two herons wait.</s>",
        [" The kettle is red.</s>", " To the hive.</s>", " Two herons wait.</s>"],
    ),
}
# Llama 3.2 stamps the day it renders; the byte-for-byte check pins the date its template is given.
RENDER_KEYWORDS = {"llama-3.2": {"date_string": "26 Jul 2024"}}


@pytest.fixture
def family_tokenizer(load_public):
    def make(name: str):
        from unsloth.chat_templates import get_chat_template

        _, tokenizer = load_public()
        for attribute, value in EXPECTED[name][0].items():
            setattr(tokenizer, attribute, value)
        return get_chat_template(tokenizer, name)

    return make


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_three_turns_render_byte_for_byte_as_the_family_publishes(family_tokenizer, name) -> None:
    tokenizer = family_tokenizer(name)
    rendered = tokenizer.apply_chat_template(CONVERSATION, tokenize=False, **RENDER_KEYWORDS.get(name, {}))
    assert rendered == EXPECTED[name][1]


def _expected_mask(tokenizer, text: str, answers: list) -> list:
    """True for each token whose first character lies in one of the answers, located in the expected text."""
    spans, position = [], 0
    for answer in answers:
        start = text.index(answer, position)
        spans.append((start, start + len(answer)))
        position = start + len(answer)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [any(begin <= start < end for begin, end in spans) for start, _ in offsets]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_train_on_responses_only_keeps_exactly_the_assistant_tokens(family_tokenizer, load_public, quiet_args, name):
    from unsloth.chat_templates import train_on_responses_only

    tokenizer = family_tokenizer(name)
    text = EXPECTED[name][1]
    model, _ = load_public()
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1, max_seq_length=512)
    )
    train_on_responses_only(trainer)  # the markers come from the family the tokenizer was given
    # Each answer is trained up to its end-of-turn token; the whitespace after it only separates turns.
    answers = [answer.rstrip() for answer in EXPECTED[name][2]]
    expected = _expected_mask(tokenizer, text, answers)
    assert trainer.train_rows.masks[0].tolist() == expected
    assert sum(expected) > 0 and not all(expected)


def test_llama_3_2_stamps_todays_date_when_none_is_given(family_tokenizer) -> None:
    tokenizer = family_tokenizer("llama-3.2")
    before = time.strftime("%d %b %Y")
    rendered = tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False)
    assert rendered.split("Today Date: ")[1].split("\n")[0] in {before, time.strftime("%d %b %Y")}


def test_system_turns_follow_each_family(family_tokenizer) -> None:
    system = [{"role": "system", "content": "Be brief."}, CONVERSATION[0]]
    llama = family_tokenizer("llama-3.1").apply_chat_template(system, tokenize=False)
    assert llama == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat colour is the kettle?<|eot_id|>"
    )
    gemma = family_tokenizer("gemma-3").apply_chat_template(system, tokenize=False, add_generation_prompt=True)
    assert (
        gemma
        == "<bos><start_of_turn>user\nBe brief.\n\nWhat colour is the kettle?<end_of_turn>\n<start_of_turn>model\n"
    )
    qwen = family_tokenizer("qwen-2.5").apply_chat_template(system, tokenize=False)
    assert qwen == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n"
    mistral = family_tokenizer("mistral").apply_chat_template(system, tokenize=False)
    assert mistral == "<s>[INST] Be brief.\n\nWhat colour is the kettle? [/INST]"
    with pytest.raises(Exception, match="System role not supported by gemma-2"):
        family_tokenizer("gemma-2").apply_chat_template(system, tokenize=False)


def test_generation_prompts(family_tokenizer) -> None:
    first = CONVERSATION[:1]
    prompt = family_tokenizer("qwen-3").apply_chat_template(
        first, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert (
        prompt
        == "<|im_start|>user\nWhat colour is the kettle?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    prompt = family_tokenizer("phi-4").apply_chat_template(first, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user<|im_sep|>What colour is the kettle?<|im_end|><|im_start|>assistant<|im_sep|>"
    prompt = family_tokenizer("vicuna").apply_chat_template(first, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("USER: What colour is the kettle? ASSISTANT:")


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
