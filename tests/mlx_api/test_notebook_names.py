"""Every name the published notebooks import from `unsloth` on MLX, and the model attributes they read:
the per-family entry points, the dataset helpers (the Ollama notebooks' `apply_chat_template` included),
`fix_tokenizer=False`, `model.config`, `model.device` and `generate(logits_processor=...)`."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_family_entry_points_load_and_take_fix_tokenizer_false(tiny_model_dir) -> None:
    import unsloth
    from unsloth import FastLanguageModel, FastQwen2Model

    for name in ("FastLlamaModel", "FastMistralModel", "FastQwen3Model", "FastGemma2Model", "FastGraniteModel"):
        assert getattr(unsloth, name) is FastLanguageModel
    model, tokenizer = FastQwen2Model.from_pretrained(str(tiny_model_dir), max_seq_length=128, fix_tokenizer=False)
    saved = json.loads((tiny_model_dir / "config.json").read_text(encoding="utf-8"))
    assert model.config.vocab_size == saved["vocab_size"]
    assert model.config.name_or_path == str(tiny_model_dir)
    assert model.config.model_type == "llama"
    assert model.device == "cuda"


def test_is_bf16_supported_is_the_older_spelling() -> None:
    from unsloth import is_bf16_supported, is_bfloat16_supported

    assert is_bf16_supported is is_bfloat16_supported


def test_generate_runs_a_hugging_face_logits_processor(load_public) -> None:
    model, tokenizer = load_public()
    prompt = np.asarray([tokenizer("The kettle is", add_special_tokens=False)["input_ids"]])
    free = model.generate(prompt, max_new_tokens=4)
    banned = int(free[0, prompt.shape[1]])
    seen = []

    def ban_first_choice(input_ids, scores):
        seen.append((input_ids.shape, type(scores).__name__))
        scores[:, banned] = -np.inf
        return scores

    held = model.generate(prompt, max_new_tokens=4, logits_processor=[ban_first_choice])
    assert banned not in held[0, prompt.shape[1] :].tolist()
    assert seen[0] == ((1, prompt.shape[1]), "ndarray")
    with pytest.raises(ValueError, match="logits_processor holds 3"):
        model.generate(prompt, max_new_tokens=2, logits_processor=[3])


OLLAMA_PROMPT = (
    "Below are some instructions that describe some tasks. Write responses that appropriately complete each "
    "request.\n\n### Instruction:\n{INPUT}\n\n### Response:\n{OUTPUT}"
)


def test_the_ollama_notebooks_dataset_cells(load_public) -> None:
    from datasets import Dataset

    from unsloth import apply_chat_template, standardize_sharegpt, to_sharegpt

    _, tokenizer = load_public()
    alpaca = Dataset.from_dict(
        {"instruction": ["Add the numbers", "Name a bird"], "input": ["1 and 2", ""], "output": ["3", "A heron"]}
    )
    dataset = to_sharegpt(
        alpaca,
        merged_prompt="{instruction}[[\nYour input is:\n{input}]]",
        output_column_name="output",
        conversation_extension=1,
    )
    dataset = standardize_sharegpt(dataset)
    dataset = apply_chat_template(dataset, tokenizer=tokenizer, chat_template=OLLAMA_PROMPT)
    eos = tokenizer.eos_token
    assert dataset["text"] == [
        "Below are some instructions that describe some tasks. Write responses that appropriately complete each "
        "request.\n\n### Instruction:\nAdd the numbers\nYour input is:\n1 and 2\n\n### Response:\n3" + eos,
        "Below are some instructions that describe some tasks. Write responses that appropriately complete each "
        "request.\n\n### Instruction:\nName a bird\n\n### Response:\nA heron" + eos,
    ]
    asked = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hi"}], tokenize=False, add_generation_prompt=True
    )
    assert asked.endswith("### Instruction:\nSay hi\n\n### Response:\n")
    assert tokenizer._ollama_modelfile == (
        "FROM {__FILE_LOCATION__}\n\n"
        'TEMPLATE """Below are some instructions that describe some tasks. Write responses that appropriately complete '
        "each request.\n\n{{ if .Prompt }}### Instruction:\n{{ .Prompt }}{{ end }}\n\n### Response:\n{{ .Response }}"
        + eos
        + '"""\n\n'
        f'PARAMETER stop "{eos}"\nPARAMETER temperature 1.5\nPARAMETER min_p 0.1\n'
    )


def test_apply_chat_template_with_two_examples_and_a_system_slot(load_public) -> None:
    from datasets import Dataset

    from unsloth.chat_templates import apply_chat_template

    _, tokenizer = load_public()
    prompt = "<<{SYSTEM}>>\nQ: {INPUT}\nA: {OUTPUT}<|eos|>\nQ: {INPUT}\nA: {OUTPUT}<|eos|>\n"
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "One?"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "Two?"},
        {"role": "assistant", "content": "2"},
    ]
    dataset = apply_chat_template(
        Dataset.from_dict({"conversations": [turns, turns[1:3]]}),
        tokenizer=tokenizer,
        chat_template=prompt,
        default_system_message="Answer.",
    )
    assert 'TEMPLATE """{{ if .System }}<<{{ .System }}>>\n{{ end }}{{ if .Prompt }}Q: ' in tokenizer._ollama_modelfile
    assert tokenizer._ollama_modelfile.endswith('SYSTEM "Answer."\n')
    assert dataset["text"] == [
        "<<Be brief.>>\nQ: One?\nA: 1<|eos|>\nQ: Two?\nA: 2<|eos|>\n",
        "<<Answer.>>\nQ: One?\nA: 1<|eos|>\n",
    ]


@pytest.mark.parametrize(
    "prompt, problem",
    [
        ("### Instruction:\n{INPUT}\n", "has 1 {INPUT} and 0 {OUTPUT}"),
        ("{OUTPUT} then {INPUT}", "has {OUTPUT} before {INPUT}"),
        (
            "Q: {INPUT}\nA: {OUTPUT}\nQ: {INPUT}\nAnswer: {OUTPUT}",
            "has two examples whose text between input and output differs",
        ),
    ],
)
def test_a_prompt_it_cannot_split_is_refused_naming_chat_template(load_public, prompt, problem) -> None:
    from datasets import Dataset

    from unsloth.chat_templates import apply_chat_template

    _, tokenizer = load_public()
    before = tokenizer.chat_template
    with pytest.raises(ValueError, match="chat_template " + problem.replace("{", r"\{").replace("}", r"\}")):
        apply_chat_template(Dataset.from_dict({"conversations": [[]]}), tokenizer=tokenizer, chat_template=prompt)
    assert tokenizer.chat_template == before
