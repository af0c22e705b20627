"""Reloading a saved adapter folder returns the tokenizer saved beside it (its chat template and EOS), and the
base's tokenizer only when none was saved there."""

from __future__ import annotations

from pathlib import Path


def test_the_tokenizer_saved_beside_the_adapter_comes_back(load_public, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel
    from unsloth.chat_templates import get_chat_template

    model, tokenizer = load_public(lora=True)
    tokenizer = get_chat_template(tokenizer, chat_template="chatml")
    tokenizer.eos_token = "<|pad|>"  # a change the base's tokenizer files do not hold
    model.save_pretrained(str(tmp_path / "lora_model"))
    tokenizer.save_pretrained(str(tmp_path / "lora_model"))
    _, reloaded = FastLanguageModel.from_pretrained(str(tmp_path / "lora_model"))
    messages = [{"role": "user", "content": "Hi"}]
    assert reloaded.chat_template == tokenizer.chat_template
    assert reloaded.apply_chat_template(messages, tokenize=False) == "<|im_start|>user\nHi<|im_end|>\n"
    assert reloaded.eos_token == "<|pad|>"


def test_without_a_saved_tokenizer_the_base_tokenizer_is_used(load_public, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = load_public(lora=True)
    model.save_pretrained(str(tmp_path / "adapter_only"))
    reloaded_model, reloaded = FastLanguageModel.from_pretrained(str(tmp_path / "adapter_only"))
    assert reloaded.get_vocab() == tokenizer.get_vocab() and reloaded.chat_template == tokenizer.chat_template
    prompt = tokenizer("The kettle", add_special_tokens=False)["input_ids"]
    assert (
        reloaded_model.generate(input_ids=[prompt], max_new_tokens=4).tolist()
        == model.generate(input_ids=[prompt], max_new_tokens=4).tolist()
    )
