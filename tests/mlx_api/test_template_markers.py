"""`train_on_responses_only(trainer)` with no markers, on chat templates our family table does not hold: the
markers are read from the tokenizer's own template (LFM2 and Granite formats, written here from their model
cards), and a template that gives none is refused naming what was tried."""

from __future__ import annotations

import pytest

from unsloth import UnslothTrainer

# LFM2: ChatML-style turns after <|startoftext|>; a system turn also lists the tools, and a content may be parts.
LFM2_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set system = namespace(text='') -%}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set system.text = messages[0]['content'] -%}"
    "{%- set messages = messages[1:] -%}{%- endif -%}"
    "{%- if tools -%}{%- set system.text = system.text + ('\\n' if system.text else '') + 'List of tools: "
    "<|tool_list_start|>' + tools | tojson + '<|tool_list_end|>' -%}{%- endif -%}"
    "{%- if system.text -%}{{- '<|im_start|>system\\n' + system.text + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}{{- part['text'] -}}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Granite 3 / 4: role headers in <|start_of_role|>...<|end_of_role|>, a default system turn, turns end in
# <|end_of_text|>.
GRANITE_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}{%- set system = messages[0]['content'] -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set system = 'Knowledge Cutoff Date: April 2024.\\nYou are Granite, developed by IBM.' -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + system + '<|end_of_text|>\\n' -}}"
    "{%- for message in loop_messages -%}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"
)
CONVERSATION = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
    {"role": "user", "content": "How many herons wait?"},
    {"role": "assistant", "content": "Two herons wait."},
]
CASES = {
    "lfm2": (
        LFM2_TEMPLATE,
        ("<|im_start|>user\n", "<|im_start|>assistant\n"),
        ["The kettle is red.<|im_end|>", "Two herons wait.<|im_end|>"],
    ),
    "granite": (
        GRANITE_TEMPLATE,
        ("<|start_of_role|>user<|end_of_role|>", "<|start_of_role|>assistant<|end_of_role|>"),
        ["The kettle is red.<|end_of_text|>", "Two herons wait.<|end_of_text|>"],
    ),
}


def _expected_mask(tokenizer, text: str, answers: list) -> list:
    spans, position = [], 0
    for answer in answers:
        start = text.index(answer, position)
        spans.append((start, start + len(answer)))
        position = start + len(answer)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [any(begin <= start < end for begin, end in spans) for start, _ in offsets]


@pytest.mark.parametrize("name", sorted(CASES))
def test_markers_come_from_the_template_itself(load_public, name) -> None:
    from unsloth.chat_templates import resolve_markers
    from unsloth.mlx.chat.families import family_of_template

    _, tokenizer = load_public()
    tokenizer.chat_template = CASES[name][0]
    assert family_of_template(tokenizer.chat_template) is None  # not the table's fast path
    assert resolve_markers(tokenizer, None, None) == CASES[name][1]
    assert resolve_markers(tokenizer, "U:", None) == ("U:", CASES[name][1][1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_train_on_responses_only_trains_exactly_the_answers(load_public, quiet_args, name) -> None:
    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public()
    tokenizer.chat_template = CASES[name][0]
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1, max_seq_length=512)
    )
    train_on_responses_only(trainer)
    expected = _expected_mask(tokenizer, text, CASES[name][2])
    assert trainer.train_rows.masks[0].tolist() == expected
    assert sum(expected) > 0 and not all(expected)


def test_a_template_without_markers_is_refused_naming_what_was_tried(load_public, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public()
    # Contents only, nothing between turns: no marker can be read from it.
    tokenizer.chat_template = "{%- for message in messages -%}{{- message['content'] -}}{%- endfor -%}"
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": "What colour? Red."}], args=quiet_args(per_device_train_batch_size=1)
    )
    with pytest.raises(ValueError, match=r"matches no family of the table \(llama-3, .*\), and reading it failed"):
        train_on_responses_only(trainer)
    assert trainer.train_rows.masks is None  # nothing half-done
