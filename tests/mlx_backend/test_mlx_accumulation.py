"""Gradient accumulation weighs every target token alike: micro-batches of 3 and 30 targets train as one batch of 33.

Each run is one SGD step at learning rate 1000 with nothing else touching the weights (no decay, no clipping,
constant schedule), so the weight change is -1000 times the step's gradient and can be compared directly.
"""

from __future__ import annotations

import numpy as np
import pytest

SHORT_ROW = [5, 9, 14, 22]  # 3 targets
LONG_ROW = [(7 * position + 3) % 500 + 2 for position in range(31)]  # 30 targets
LEARNING_RATE = 1000.0


def one_sgd_step(load_tiny, config, rows, batch_size, accumulation, compiled=False):
    """The weight change and the logged loss and grad norm of one optimizer step over `rows`, in order."""
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    before = {name: np.array(value) for name, value in tree_flatten(model.parameters())}
    args = config(
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        optim="sgd",
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        dataset_order="sequential",
        max_seq_length=64,
        mx_compile=compiled,
    )
    trainer = MLXTrainer(model, tokenizer, [{"input_ids": row} for row in rows], args=args)
    trainer.train()
    after = {name: np.array(value) for name, value in tree_flatten(model.parameters())}
    (log,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    change = {name: (after[name] - before[name]).astype(np.float64) for name in before}
    return change, log["loss"], log["grad_norm"]


def largest_gap(actual: dict, expected: dict) -> float:
    """The largest difference of any weight's change, relative to the largest change in that weight."""
    gaps = []
    for name, value in expected.items():
        scale = np.abs(value).max()
        assert scale > 0, f"{name} did not move"
        gaps.append(np.abs(actual[name] - value).max() / scale)
    return max(gaps)


@pytest.mark.parametrize("rows", [[SHORT_ROW, LONG_ROW], [LONG_ROW, SHORT_ROW]], ids=["3-then-30", "30-then-3"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_micro_batches_of_3_and_30_targets_step_as_their_concatenation(load_tiny, config, rows, compiled):
    accumulated = one_sgd_step(load_tiny, config, rows, batch_size=1, accumulation=2, compiled=compiled)
    concatenated = one_sgd_step(load_tiny, config, rows, batch_size=2, accumulation=1)

    assert largest_gap(accumulated[0], concatenated[0]) < 2e-6
    assert accumulated[1] == pytest.approx(concatenated[1], rel=1e-6)
    assert accumulated[2] == pytest.approx(concatenated[2], rel=1e-6)


def test_the_step_is_the_token_weighted_mean_not_the_mean_of_micro_batch_means(load_tiny, config):
    short_change, short_loss, _ = one_sgd_step(load_tiny, config, [SHORT_ROW], batch_size=1, accumulation=1)
    long_change, long_loss, _ = one_sgd_step(load_tiny, config, [LONG_ROW], batch_size=1, accumulation=1)
    change, loss, _ = one_sgd_step(load_tiny, config, [SHORT_ROW, LONG_ROW], batch_size=1, accumulation=2)

    token_weighted = {name: (3 * short_change[name] + 30 * long_change[name]) / 33 for name in change}
    assert largest_gap(change, token_weighted) < 2e-6
    assert loss == pytest.approx((3 * short_loss + 30 * long_loss) / 33, rel=1e-6)
    # The rule this replaced, each micro-batch's mean weighing one half, is far from it on these rows.
    halves = {name: (short_change[name] + long_change[name]) / 2 for name in change}
    assert largest_gap(change, halves) > 1e-1
    assert abs(loss - (short_loss + long_loss) / 2) > 1e-2
