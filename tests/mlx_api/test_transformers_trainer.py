"""Issue 46 item 5: transformers' `Trainer` / `Seq2SeqTrainer` given an MLX model train it on MLX, as TRL's do.

Here without torch, where transformers' classes are placeholders that would refuse to build; the same route with
torch installed is checked in with_torch/test_transformers_trainer_torch.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import QUESTIONS


def token_rows(tokenizer) -> list:
    return [{"input_ids": tokenizer(f"{question} {answer}")["input_ids"]} for question, answer in QUESTIONS]


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def arguments(tmp_path, kind=None, **overrides):
    from transformers import TrainingArguments

    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=2, logging_steps=1)
    values.update(learning_rate=1e-3, save_strategy="no", report_to="none", **overrides)
    return (kind or TrainingArguments)(**values)


def test_transformers_trainer_takes_an_mlx_model_and_the_models_own_tokenizer(load_public, tmp_path) -> None:
    from transformers import Trainer

    model, tokenizer = load_public(lora=True)
    # The Orpheus notebook's call: no tokenizer and no collator, a tokenized dataset.
    trainer = Trainer(model=model, train_dataset=token_rows(tokenizer), args=arguments(tmp_path))
    assert isinstance(trainer, UnslothTrainer) and trainer.tokenizer is tokenizer
    routed = first_loss(trainer)

    reference_model, _ = load_public(lora=True)
    reference = UnslothTrainer(reference_model, arguments(tmp_path), None, token_rows(tokenizer), None, tokenizer)
    assert abs(routed - first_loss(reference)) <= 1e-6


def test_seq2seq_trainer_routes_positionally_with_a_collator(load_public, tmp_path) -> None:
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_public(lora=True)
    seen = []

    def collate(examples: list) -> dict:
        seen.extend(examples)
        ids = [example["input_ids"] for example in examples]
        return {"input_ids": np.asarray(ids), "labels": np.asarray(ids)}

    rows = [{**row, "spoken": "kept for the collator"} for row in token_rows(tokenizer)]
    trainer = Seq2SeqTrainer(model, arguments(tmp_path, Seq2SeqTrainingArguments), collate, rows)
    assert isinstance(trainer, UnslothTrainer) and trainer.data_collator is collate
    # transformers' trainer hands the rows to the collator as they are.
    assert seen and all("spoken" in example for example in seen)
    assert np.isfinite(first_loss(trainer))


def test_what_transformers_trainer_would_run_in_torch_is_refused_by_name(load_public, tmp_path) -> None:
    from transformers import Trainer

    model, tokenizer = load_public()
    with pytest.raises(NotImplementedError, match="compute_metrics"):
        Trainer(model=model, args=arguments(tmp_path), train_dataset=token_rows(tokenizer), compute_metrics=len)


def test_seq2seq_trainers_own_positional_order_names_what_is_refused(load_public, tmp_path) -> None:
    from transformers import Seq2SeqTrainer

    model, tokenizer = load_public()
    rows = token_rows(tokenizer)
    # Seq2SeqTrainer's twelfth argument is preprocess_logits_for_metrics (Trainer's is optimizer_cls_and_kwargs).
    positional = (arguments(tmp_path), None, rows, None, tokenizer, None, None, None, None, (None, None), len)
    with pytest.raises(NotImplementedError, match="does not support preprocess_logits_for_metrics"):
        Seq2SeqTrainer(model, *positional)
