"""Accumulation with `train_on_responses_only`: micro-batches weigh by their answer tokens, not by their rows.

One SGD step (learning rate 1000, nothing else touching the weights) over a short and a long answer, read as two
accumulated micro-batches and as one batch of two, must move the weights alike and log the same loss.
"""

from __future__ import annotations

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import chat_text

ROWS = [
    {"text": chat_text("Is the kettle red?", "Yes.")},
    {"text": chat_text("What does the lighthouse do?", "It blinks green over the harbour every night until dawn.")},
]


def one_step(load_public, quiet_args, rows, batch_size, accumulation):
    from mlx.utils import tree_flatten

    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public()
    before = {name: np.array(value) for name, value in tree_flatten(model.parameters())}
    args = quiet_args(
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        optim="sgd",
        learning_rate=1000.0,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        logging_steps=1,
        dataset_order="sequential",
    )
    trainer = UnslothTrainer(model, tokenizer, rows, args=args)
    train_on_responses_only(trainer, instruction_part="<|user|>\n", response_part="<|assistant|>\n")
    answer_tokens = [int(mask[1:].sum()) for mask in trainer.train_rows.masks]
    trainer.train()
    after = {name: np.array(value) for name, value in tree_flatten(model.parameters())}
    change = {name: after[name].astype(np.float64) - before[name] for name in before}
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    return change, log["loss"], answer_tokens


def largest_gap(actual: dict, expected: dict) -> float:
    return max(np.abs(actual[name] - value).max() / np.abs(value).max() for name, value in expected.items())


def test_accumulated_answers_train_as_one_batch_of_them(load_public, quiet_args) -> None:
    accumulated, accumulated_loss, answer_tokens = one_step(load_public, quiet_args, ROWS, 1, 2)
    together, together_loss, _ = one_step(load_public, quiet_args, ROWS, 2, 1)
    assert answer_tokens[1] >= 4 * answer_tokens[0]  # really uneven micro-batches
    assert largest_gap(accumulated, together) < 2e-6
    assert accumulated_loss == pytest.approx(together_loss, rel=1e-6)

    short, short_loss, _ = one_step(load_public, quiet_args, ROWS[:1], 1, 1)
    long, long_loss, _ = one_step(load_public, quiet_args, ROWS[1:], 1, 1)
    short_count, long_count = answer_tokens
    weighted_loss = (short_count * short_loss + long_count * long_loss) / (short_count + long_count)
    assert accumulated_loss == pytest.approx(weighted_loss, rel=1e-6)
    halves = {name: (short[name] + long[name]) / 2 for name in short}
    assert largest_gap(accumulated, halves) > 1e-1
