"""Gaps the wider notebook run found: the tokenizer from `from_pretrained` answers `apply_chat_template(...,
tokenize=True)` with a list of ids as transformers 4.56 did (the notebooks measure it with `len`), and
`FastModel.get_peft_model`'s switches choose every linear under a block's attention and MLP parts, as CUDA does,
so an LFM2 model (whose projections are not q/k/v/o and gate/up/down) gets its LoRA."""

from __future__ import annotations

from pathlib import Path

import pytest

CONVERSATION = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
]
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"


@pytest.fixture
def chat_tokenizer(load_public) -> object:
    _, tokenizer = load_public()
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_tokenized_chat_template_is_a_list_of_ids(chat_tokenizer) -> None:
    ids = chat_tokenizer.apply_chat_template(CONVERSATION, tokenize=True, add_generation_prompt=True)
    text = chat_tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert ids == chat_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 10  # the notebooks' length check, not the 2 keys of a dict


def test_explicit_return_dict_keeps_the_dict(chat_tokenizer) -> None:
    answer = chat_tokenizer.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True)
    assert set(answer) == {"input_ids", "attention_mask"}
    assert answer["input_ids"] == chat_tokenizer.apply_chat_template(CONVERSATION)


def test_text_and_batches_are_unchanged(chat_tokenizer) -> None:
    text = chat_tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert text.startswith("<|user|>\nWhat colour") and isinstance(text, str)
    batch = chat_tokenizer.apply_chat_template([CONVERSATION, CONVERSATION[:1]], tokenize=True)
    assert len(batch) == 2 and all(isinstance(row, list) for row in batch)


def test_reloaded_adapter_tokenizer_also_gives_a_list(load_public, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = load_public(lora=True)
    tokenizer.chat_template = TEMPLATE
    model.save_pretrained(str(tmp_path / "adapter"))
    tokenizer.save_pretrained(str(tmp_path / "adapter"))
    _, reloaded = FastLanguageModel.from_pretrained(str(tmp_path / "adapter"))
    assert isinstance(reloaded.apply_chat_template(CONVERSATION), list)


@pytest.fixture(scope="module")
def lfm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

    return build_tiny_hybrid_model(tmp_path_factory.mktemp("lfm2") / "model", "lfm2")


def _lora_paths(model) -> set:
    return {path for path, module in model.named_modules() if hasattr(module, "lora_a")}


def test_fast_model_switches_adapt_lfm2_attention_and_mlp(lfm2_dir: Path) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(lfm2_dir), load_in_4bit=False)
    model = FastModel.get_peft_model(
        model,
        finetune_vision_layers=False,
        finetune_language_layers=True,
        finetune_attention_modules=True,
        finetune_mlp_modules=True,
        r=8,
        lora_alpha=8,
    )
    attention = [index for index, block in enumerate(model.layers) if block.is_attention_layer]
    assert attention == [1, 3]
    expected = {f"model.layers.{i}.feed_forward.{name}" for i in range(4) for name in ("w1", "w2", "w3")}
    expected |= {
        f"model.layers.{i}.self_attn.{name}" for i in attention for name in ("q_proj", "k_proj", "v_proj", "out_proj")
    }
    # The convolution blocks are neither attention nor MLP, so CUDA's switches leave them alone too.
    assert _lora_paths(model) == expected


def test_fast_model_attention_switch_alone_on_lfm2(lfm2_dir: Path) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(lfm2_dir), load_in_4bit=False)
    model = FastModel.get_peft_model(model, finetune_mlp_modules=False, finetune_vision_layers=False, r=8)
    assert _lora_paths(model) == {
        f"model.layers.{i}.self_attn.{name}" for i in (1, 3) for name in ("q_proj", "k_proj", "v_proj", "out_proj")
    }


def test_fast_model_switches_on_llama_keep_the_seven_projections(load_public) -> None:
    from unsloth import FastModel

    model, _ = load_public()
    model = FastModel.get_peft_model(model, finetune_vision_layers=False, r=8)
    names = {path.rsplit(".", 1)[-1] for path in _lora_paths(model)}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_fast_model_takes_the_families_own_auto_model(lfm2_dir: Path) -> None:
    """The LFM2 notebook reloads with `auto_model=Lfm2ForCausalLM`: the class of the checkpoint's own family."""
    from transformers import AutoModelForCausalLM, Lfm2ForCausalLM

    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(lfm2_dir), load_in_4bit=False, auto_model=Lfm2ForCausalLM)
    assert model.config.model_type == "lfm2"
    model, _ = FastModel.from_pretrained(str(lfm2_dir), load_in_4bit=False, auto_model=AutoModelForCausalLM)
    assert model.config.model_type == "lfm2"


def test_fast_model_refuses_another_familys_auto_model(lfm2_dir: Path) -> None:
    from transformers import LlamaForCausalLM

    from unsloth import FastModel

    with pytest.raises(NotImplementedError, match=r"auto_model=LlamaForCausalLM.*lfm2.*Lfm2ForCausalLM"):
        FastModel.from_pretrained(str(lfm2_dir), load_in_4bit=False, auto_model=LlamaForCausalLM)


def test_gguf_modelfile_keeps_the_prompt_template(load_public, tmp_path: Path) -> None:
    """The Ollama notebook sets its own prompt with `apply_chat_template(dataset, ...)`, then saves a GGUF: the
    Modelfile written beside it carries that prompt as its TEMPLATE, as CUDA Unsloth's does, on every save."""
    from datasets import Dataset

    from unsloth import apply_chat_template

    model, tokenizer = load_public(lora=True)
    rows = Dataset.from_list(
        [{"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}]
    )
    apply_chat_template(rows, tokenizer=tokenizer, chat_template="Answer each one.\n\n{INPUT}\n\n{OUTPUT}")
    for method in ("q8_0", "f16"):
        folder = tmp_path / method
        model.save_pretrained_gguf(str(folder), tokenizer, quantization_method=method)
        text = (folder / "Modelfile").read_text(encoding="utf-8")
        location = text.splitlines()[0].removeprefix("FROM ")
        assert (folder / location).is_file(), text
        assert 'TEMPLATE """Answer each one.\n\n{{ if .Prompt }}{{ .Prompt }}{{ end }}' in text, text
        assert "{__FILE_LOCATION__}" not in text
    # What the notebook prints: the Modelfile the template made, as CUDA Unsloth keeps it.
    assert tokenizer._ollama_modelfile.startswith("FROM {__FILE_LOCATION__}")
