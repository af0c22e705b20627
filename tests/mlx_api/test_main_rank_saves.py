"""Saves guarded for rank 0 stay plain in one process: they write, and the tokenizer still pickles for map workers."""

from __future__ import annotations

import dill


def test_one_process_saves_as_before_and_the_tokenizer_pickles(load_public, tmp_path):
    model, tokenizer = load_public(lora=True)
    model.save_pretrained(str(tmp_path / "lora_model"))
    tokenizer.save_pretrained(str(tmp_path / "lora_model"))
    assert (tmp_path / "lora_model" / "adapter_config.json").is_file()
    assert (tmp_path / "lora_model" / "tokenizer.json").is_file()
    # datasets sends the mapped function, tokenizer included, to its workers with dill and fingerprints it with it.
    copy = dill.loads(dill.dumps(tokenizer))
    assert copy("The kettle is red.")["input_ids"] == tokenizer("The kettle is red.")["input_ids"]
