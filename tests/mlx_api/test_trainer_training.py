"""Rule 3, trained for real on the tiny llama: callbacks, schedules, saves, batch order and response-only loss."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unsloth import UnslothTrainer
from unsloth_zoo.mlx import MLXTrainer

from .conftest import chat_text

PEAK = 3e-3


def test_trl_order_trains_in_epoch_mode_and_routes_callbacks(load_public, chat_rows, quiet_args, recorder) -> None:
    model, tokenizer = load_public(lora=True)
    args = quiet_args(max_steps=None, num_train_epochs=3, gradient_accumulation_steps=2, logging_steps=1)
    trainer = UnslothTrainer(model, args, None, chat_rows, None, tokenizer, callbacks=[recorder])
    output = trainer.train()
    # 8 rows in batches of 2 are 4 micro-batches, 2 per step with accumulation 2: 2 steps an epoch, 6 in 3 epochs.
    assert output.global_step == 6
    assert recorder.names().count("on_step_end") == 6
    assert recorder.names()[0] == "on_train_begin" and recorder.names()[-1] == "on_train_end"
    losses = [log["loss"] for log in recorder.logs if "loss" in log]
    assert len(losses) == 6 and losses[-1] < losses[0]


def test_warmup_ratio_resolves_against_the_real_total_in_epoch_mode(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public(lora=True)
    args = quiet_args(
        max_steps=None, num_train_epochs=2, warmup_steps=None, warmup_ratio=0.25, logging_steps=1, learning_rate=PEAK
    )
    trainer = UnslothTrainer(model, args, None, chat_rows, None, tokenizer)
    trainer.train()
    rates = [log["learning_rate"] for log in trainer.state.log_history if "learning_rate" in log]
    # 2 epochs of 4 steps: 8 steps, warmup ceil(8 * 0.25) = 2, then linear decay over the remaining 6.
    expected = [PEAK * factor for factor in (0, 1 / 2, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6)]
    assert rates == pytest.approx(expected)


def test_save_strategy_no_writes_no_intermediate_checkpoints(
    load_public, chat_rows, quiet_args, tmp_path: Path
) -> None:
    model, tokenizer = load_public(lora=True)
    quiet = UnslothTrainer(
        model, quiet_args(save_strategy="no", output_dir=str(tmp_path / "no")), None, chat_rows, None, tokenizer
    )
    quiet.train()
    assert sorted(path.name for path in (tmp_path / "no").glob("checkpoint-*")) == []
    assert (tmp_path / "no" / "adapters.safetensors").is_file()  # the final model is still saved
    saving = UnslothTrainer(
        model,
        quiet_args(save_strategy="steps", save_steps=2, output_dir=str(tmp_path / "steps")),
        None,
        chat_rows,
        None,
        tokenizer,
    )
    saving.train()
    assert sorted(path.name for path in (tmp_path / "steps").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_without_torch_the_order_is_still_cuda_unsloths(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(seed=1233))
    assert trainer.cuda_batch_order is True and trainer.args.dataset_order == "torch_randperm"
    trainer._epoch_batches(1)
    # torch.randperm(8) seeded with 1233 + 1, as torch 2.13 prints it; drawn here without importing torch.
    assert trainer.train_rows.order.tolist() == [7, 5, 2, 3, 4, 6, 1, 0]


def _token_ids(tokenizer, text: str) -> list:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_response_masks_cover_exactly_the_answers(load_public, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public()
    text = chat_text("Where is the kettle?", "On the stove.") + chat_text("And the bread?", "By the door.")
    trainer = UnslothTrainer(model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1))
    train_on_responses_only(trainer, instruction_part="<|user|>\n", response_part="<|assistant|>\n")
    prompt_one = _token_ids(tokenizer, "<|user|>\nWhere is the kettle?<|eos|>\n<|assistant|>\n")
    answer_one = _token_ids(tokenizer, "On the stove.<|eos|>")
    prompt_two = _token_ids(tokenizer, "\n<|user|>\nAnd the bread?<|eos|>\n<|assistant|>\n")
    answer_two = _token_ids(tokenizer, "By the door.<|eos|>")
    newline = _token_ids(tokenizer, "\n")
    # The newline after each end-of-turn token separates turns; it is not trained.
    expected = (
        [False] * len(prompt_one)
        + [True] * len(answer_one)
        + [False] * len(prompt_two)
        + [True] * len(answer_two)
        + [False] * len(newline)
    )
    assert trainer.train_rows.source_rows[0].tolist() == prompt_one + answer_one + prompt_two + answer_two + newline
    assert trainer.train_rows.masks[0].tolist() == expected


def _cross_entropy_by_hand(model, ids: list, keep: list) -> float:
    """Mean of -log p(next token) over the targets whose token `keep` marks, from the model's own logits."""
    import mlx.core as mx

    logits = np.array(model(mx.array([ids[:-1]])).astype(mx.float32))[0]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    losses = [-log_probs[position, ids[position + 1]] for position in range(len(ids) - 1) if keep[position + 1]]
    return float(np.mean(losses))


def test_training_loss_counts_only_response_tokens(load_public, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public(lora=True)
    text = chat_text("Which bird waits in the reeds?", "A heron waits there.")
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1, max_steps=1, logging_steps=1)
    )
    train_on_responses_only(trainer)
    ids = trainer.train_rows.source_rows[0].tolist()
    mask = trainer.train_rows.masks[0].tolist()
    masked = _cross_entropy_by_hand(model, ids, mask)
    unmasked = _cross_entropy_by_hand(model, ids, [True] * len(ids))
    trainer.train()
    logged = trainer.state.log_history[0]["loss"]
    assert logged == pytest.approx(masked, rel=1e-4)
    assert abs(masked - unmasked) > 1e-3  # the two losses differ, so matching the masked one means the mask was used


def test_responses_only_refusals_and_routing(load_public, chat_rows, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only
    from unsloth.mlx.chat.responses_only import train_on_responses_only as mlx_version

    model, tokenizer = load_public()
    with_eval = UnslothTrainer(model, tokenizer, chat_rows, chat_rows[:2], args=quiet_args())
    with pytest.raises(NotImplementedError, match="without eval_dataset"):
        train_on_responses_only(with_eval)
    no_marker = UnslothTrainer(model, tokenizer, [{"text": "no chat markers here at all"}], args=quiet_args())
    with pytest.raises(ValueError, match="response marker '<\\|assistant\\|>\\\\n'"):
        train_on_responses_only(no_marker)
    backend = MLXTrainer(model, tokenizer, chat_rows, args=quiet_args())
    with pytest.raises(TypeError, match="got MLXTrainer"):
        train_on_responses_only(backend)
    with pytest.raises(TypeError, match="got object"):
        mlx_version(object())
    # Anything that is not an MLX trainer still goes to the datasets version, which wants a tokenizer.
    with pytest.raises(ValueError, match="needs a trainer with a tokenizer or processing_class"):
        train_on_responses_only(object())
