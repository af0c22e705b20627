"""Issue 46 item 4: a notebook's own data collator feeds the MLX trainer; its batches are converted, never refused.

The built-in path (rows with input_ids and -100-masked labels, padded by the trainer) is the reference: a collator
that pads those same rows, left or right, as numpy arrays or lists, trains to the same losses.
"""

from __future__ import annotations

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import QUESTIONS

PROMPT_TOKENS = 3


def token_rows(tokenizer) -> list:
    """Tokenized question/answer rows whose labels mask the first tokens, as a notebook's map() makes them."""
    rows = []
    for question, answer in QUESTIONS:
        ids = tokenizer(f"{question} {answer}")["input_ids"]
        rows.append({"input_ids": ids, "labels": [-100] * PROMPT_TOKENS + ids[PROMPT_TOKENS:], "note": question})
    return rows


class PaddingCollator:
    """Pads input_ids, attention_mask and labels to the batch's longest row, as a notebook's collate_fn does."""

    def __init__(self, pad_id: int, side: str = "right", as_lists: bool = False) -> None:
        self.pad_id, self.side, self.as_lists = pad_id, side, as_lists
        self.calls = 0

    def _pad(self, values: list, width: int, fill: int) -> list:
        padding = [fill] * (width - len(values))
        return padding + values if self.side == "left" else values + padding

    def __call__(self, examples: list) -> dict:
        self.calls += 1
        width = max(len(example["input_ids"]) for example in examples) + 2
        batch = {
            "input_ids": [self._pad(list(row["input_ids"]), width, self.pad_id) for row in examples],
            "attention_mask": [self._pad([1] * len(row["input_ids"]), width, 0) for row in examples],
            "labels": [self._pad(list(row["labels"]), width, -100) for row in examples],
        }
        return batch if self.as_lists else {name: np.asarray(value) for name, value in batch.items()}


def logged_losses(trainer) -> list:
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.fixture
def reference_losses(load_public, quiet_args) -> list:
    model, tokenizer = load_public(lora=True)
    rows = [{"input_ids": row["input_ids"], "labels": row["labels"]} for row in token_rows(tokenizer)]
    return logged_losses(UnslothTrainer(model, quiet_args(logging_steps=1), train_dataset=rows, tokenizer=tokenizer))


@pytest.mark.parametrize("side, as_lists", [("right", False), ("left", False), ("right", True)])
def test_a_collators_batches_train_as_the_trainers_own(load_public, quiet_args, reference_losses, side, as_lists):
    model, tokenizer = load_public(lora=True)
    collator = PaddingCollator(tokenizer.pad_token_id, side, as_lists)
    trainer = UnslothTrainer(model, quiet_args(logging_steps=1), collator, token_rows(tokenizer), None, tokenizer)
    assert trainer.data_collator is collator and collator.calls > 0
    losses = logged_losses(trainer)
    assert len(losses) == len(reference_losses) == 4
    np.testing.assert_allclose(losses, reference_losses, rtol=0, atol=1e-6)


def test_text_rows_are_tokenized_before_the_collator_as_trl_does(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public(lora=True)
    seen = []

    def collate(examples: list) -> dict:
        seen.extend(examples)
        return {"input_ids": np.asarray([example["input_ids"] for example in examples])}

    trainer = UnslothTrainer(model, quiet_args(), collate, chat_rows, None, tokenizer)
    assert seen and all(set(example) == {"input_ids"} for example in seen)
    assert len(trainer.train_rows) == len(chat_rows)
    # No labels from the collator: every attended token is a target, as TRL's language-modeling collator makes them.
    assert trainer.train_rows.masks is None or all(mask.all() for mask in trainer.train_rows.masks)


def test_labels_that_are_not_the_rows_own_tokens_are_refused_by_name(load_public, quiet_args) -> None:
    model, tokenizer = load_public()

    def classify(examples: list) -> dict:
        ids = [example["input_ids"] for example in examples]
        return {"input_ids": ids, "labels": [[7] * len(row) for row in ids]}

    with pytest.raises(NotImplementedError, match="labels .* not the row's own input_ids"):
        UnslothTrainer(model, quiet_args(), classify, token_rows(tokenizer), None, tokenizer)
