"""Issue 46 item 4: a notebook's collate_fn returning torch tensors (the Gemma 3n audio notebook's shape) trains on
MLX to the losses of the trainer's own padding on the same rows."""

from __future__ import annotations

import numpy as np

from unsloth import UnslothTrainer

from ..conftest import QUESTIONS, chat_text


def logged_losses(trainer) -> list:
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_a_torch_collate_fn_trains_to_the_built_in_losses(load_public, quiet_args) -> None:
    texts = [chat_text(question, answer) for question, answer in QUESTIONS]
    model, tokenizer = load_public(lora=True)
    pad = tokenizer.pad_token_id

    def collate_fn(examples: list) -> dict:
        batch = tokenizer([example["text"] for example in examples], return_tensors="pt", padding=True)
        labels = batch["input_ids"].clone()
        labels[labels == pad] = -100
        batch["labels"] = labels
        return batch

    arguments = {"logging_steps": 1, "dataset_kwargs": {"skip_prepare_dataset": True}}
    rows = [{"text": text} for text in texts]
    trainer = UnslothTrainer(model, quiet_args(**arguments), collate_fn, rows, None, tokenizer)
    actual = logged_losses(trainer)

    reference_model, _ = load_public(lora=True)
    tokenized = []
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        tokenized.append({"input_ids": ids, "labels": [-100 if token == pad else token for token in ids]})
    expected = logged_losses(
        UnslothTrainer(reference_model, quiet_args(logging_steps=1), None, tokenized, None, tokenizer)
    )
    assert len(actual) == len(expected) == 4
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6)
