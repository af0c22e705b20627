"""What TRL's `SFTTrainer` and CUDA Unsloth give a notebook, given the same on MLX: the arguments' attributes, the
prepared dataset's columns, the order rows are read in, the memory helpers' shapes and the training printout."""

from __future__ import annotations

import numpy as np
import pytest

from unsloth import UnslothTrainer, UnslothTrainingArguments

from .conftest import chat_text


def test_trl_keywords_stay_readable_as_attributes() -> None:
    from unsloth.mlx.compat.trl_shim import SFTConfig

    with pytest.warns(RuntimeWarning, match="SFTConfig: bf16 has no effect"):
        args = SFTConfig(
            bf16=True,
            gradient_checkpointing=True,
            report_to="none",
            max_length=256,
            dataset_kwargs={"skip_prepare_dataset": True},
            dataset_text_field="text",
        )
    assert (args.bf16, args.gradient_checkpointing, args.report_to) == (True, True, "none")
    assert (args.max_length, args.max_seq_length, args.dataset_kwargs) == (256, 256, {"skip_prepare_dataset": True})
    unset = UnslothTrainingArguments()
    # Keywords not given read as TRL's defaults, and the two aliases read through to the backend's fields.
    assert (unset.fp16, unset.packing, unset.dataset_kwargs, unset.push_to_hub) == (False, False, None, False)
    assert (unset.evaluation_strategy, unset.max_length) == ("no", None)
    unset.max_length = 128
    assert unset.max_seq_length == 128


def test_trainer_keeps_the_trl_attributes_of_its_arguments(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    with pytest.warns(RuntimeWarning, match="report_to"):
        args = quiet_args(report_to="wandb", gradient_checkpointing="unsloth")
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=args)
    assert (trainer.args.report_to, trainer.args.gradient_checkpointing) == ("wandb", "unsloth")


def test_dataset_order_reports_the_order_used(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    preserved = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(preserve_dataset_order=True))
    assert preserved.args.dataset_order == "sequential" and preserved.args.preserve_dataset_order is True
    shuffled = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args())
    assert shuffled.args.dataset_order == "torch_randperm"
    # Whatever the trainer feeds the backend, the order it reports is the one it reads rows in each epoch.
    # CUDA Unsloth's order is shown to the backend by presenting the rows permuted, then batched in turn.
    assert [batch.tolist() for batch in shuffled._epoch_batches(0)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert shuffled.train_rows.order.tolist() != list(range(8))


def test_train_dataset_holds_trl_prepared_columns(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args())
    first = trainer.train_dataset[0]
    assert set(trainer.train_dataset.column_names) == {"input_ids", "attention_mask"}
    assert first["input_ids"] == tokenizer(chat_rows[0]["text"], add_special_tokens=False)["input_ids"]
    assert first["attention_mask"] == [1] * len(first["input_ids"])
    assert len(trainer.train_dataset) == len(chat_rows)


def _cross_entropy_by_hand(model, ids: list, labels: list) -> float:
    """Hugging Face's loss: mean -log p(labels[t+1]) over the positions whose label is not -100."""
    import mlx.core as mx

    logits = np.array(model(mx.array([ids[:-1]])).astype(mx.float32))[0]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    kept = [position for position in range(len(ids) - 1) if labels[position + 1] != -100]
    return float(np.mean([-log_probs[position, labels[position + 1]] for position in kept]))


def test_labels_are_minus_100_exactly_where_the_loss_ignores(load_public, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public(lora=True)
    text = chat_text("Which bird waits?", "A heron.") + chat_text("Where?", "In the reeds.")
    trainer = UnslothTrainer(
        model, tokenizer, [{"text": text}], args=quiet_args(per_device_train_batch_size=1, max_steps=1)
    )
    train_on_responses_only(trainer)
    row = trainer.train_dataset[0]
    assert set(row) == {"input_ids", "attention_mask", "labels"}
    kept = [token for token, label in zip(row["input_ids"], row["labels"]) if label != -100]
    assert tokenizer.decode(kept) == "A heron.<|eos|>In the reeds.<|eos|>"
    by_hand = _cross_entropy_by_hand(model, row["input_ids"], row["labels"])
    trainer.train()
    assert trainer.state.log_history[0]["loss"] == pytest.approx(by_hand, rel=1e-4)


def test_gpu_memory_stats_unpack_as_notebooks_do() -> None:
    from unsloth import get_gpu_memory_stats
    from unsloth.mlx.compat.memory import max_memory_reserved, total_memory

    gpu_stats, start_gpu_memory, max_memory = get_gpu_memory_stats()
    assert gpu_stats.name.endswith("(MLX CPU)") and gpu_stats.total_memory == total_memory()
    assert max_memory == round(total_memory() / 1024**3, 3)
    assert start_gpu_memory <= round(max_memory_reserved() / 1024**3, 3)
    assert get_gpu_memory_stats()["total_memory_gb"] == max_memory  # the figures stay readable by name


def test_clear_gpu_memory_without_mx_clear_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import mlx.core as mx

    from unsloth import clear_gpu_memory

    cleared = []
    # mlx before 0.25 has no mx.clear_cache; its cache is cleared through mx.metal.
    monkeypatch.delattr(mx, "clear_cache")
    monkeypatch.setattr(mx, "metal", types.SimpleNamespace(clear_cache=lambda: cleared.append(True)), raising=False)
    clear_gpu_memory()
    assert cleared == [True]
    monkeypatch.setattr(mx, "metal", types.SimpleNamespace(), raising=False)
    clear_gpu_memory()  # neither is there: nothing to clear, and no error


def test_training_prints_as_the_hugging_face_trainer(load_public, chat_rows, quiet_args, capsys) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    model, tokenizer = load_public()
    printed = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(disable_tqdm=True, logging_steps=2))
    assert [type(item) for item in printed.callback_handler.callbacks].count(PrinterCallback) == 1
    capsys.readouterr()
    printed.train()
    losses = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{'loss'")]
    assert len(losses) == 2  # four steps, a log every two
    barred = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(disable_tqdm=False))
    assert ProgressCallback in [type(item) for item in barred.callback_handler.callbacks]
    barred.train()
    assert "4/4" in capsys.readouterr().err  # tqdm's bar reached the last step
