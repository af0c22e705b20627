"""Rule 3: how `UnslothTrainer(...)` reads a call, what it refuses at construction, its context length and defaults."""

from __future__ import annotations

import logging

import pytest

from unsloth import UnslothTrainer

from .conftest import QUESTIONS, chat_text


class ExplodingDataset:
    """A dataset that fails if anyone reads it: proves a refusal came before tokenization."""

    def __iter__(self):
        raise AssertionError("the dataset was read before the call was refused")

    def __len__(self) -> int:
        return 8


def test_mlx_order_and_trl_order_are_told_apart_by_the_second_argument(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    mlx_order = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args())
    assert mlx_order.tokenizer is tokenizer and len(mlx_order.train_rows) == 8
    trl_order = UnslothTrainer(model, quiet_args(), None, chat_rows, None, tokenizer)
    assert trl_order.tokenizer is tokenizer and trl_order.processing_class is tokenizer
    assert len(trl_order.train_rows) == 8 and trl_order.args.max_steps == 4
    from_dict = UnslothTrainer(
        model, {"max_steps": 2, "save_strategy": "no"}, train_dataset=chat_rows, processing_class=tokenizer
    )
    assert from_dict.args.max_steps == 2 and from_dict.tokenizer is tokenizer


def test_processing_class_supplies_the_tokenizer_only_when_tokenizer_is_none(
    load_public, chat_rows, quiet_args
) -> None:
    model, tokenizer = load_public()
    _, other = load_public()
    trainer = UnslothTrainer(
        model=model, args=quiet_args(), train_dataset=chat_rows, tokenizer=tokenizer, processing_class=other
    )
    assert trainer.tokenizer is tokenizer


def test_malformed_calls_are_type_errors(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    with pytest.raises(TypeError, match="needs a tokenizer: pass processing_class="):
        UnslothTrainer(model, None, chat_rows)
    with pytest.raises(TypeError, match="at most 4 positional arguments in the MLX order"):
        UnslothTrainer(model, tokenizer, chat_rows, None, None)
    with pytest.raises(TypeError, match="multiple values for tokenizer"):
        UnslothTrainer(model, tokenizer, chat_rows, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="unexpected keyword argument.*: warp_speed"):
        UnslothTrainer(model, quiet_args(), train_dataset=chat_rows, processing_class=tokenizer, warp_speed=9)


def test_padding_collators_are_accepted(load_public, chat_rows, quiet_args) -> None:
    from transformers import (
        DataCollatorForLanguageModeling,
        DataCollatorForSeq2Seq,
        DataCollatorWithPadding,
        DefaultDataCollator,
    )

    model, tokenizer = load_public()
    for collator in (
        DataCollatorForSeq2Seq(tokenizer),
        DataCollatorWithPadding(tokenizer),
        DefaultDataCollator(),
        DataCollatorForLanguageModeling(tokenizer, mlm=False),
    ):
        trainer = UnslothTrainer(model, quiet_args(), collator, chat_rows, None, tokenizer)
        assert trainer.data_collator is collator


def test_a_masked_language_modeling_collator_is_refused_at_construction(load_public, quiet_args) -> None:
    from transformers import DataCollatorForLanguageModeling

    model, tokenizer = load_public()
    masking = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    masking.mlm = True  # what mlm=True builds, on a tokenizer that has no mask token to build it with
    with pytest.raises(NotImplementedError, match=r"data_collator=\S*DataCollatorForLanguageModeling with mlm=True"):
        UnslothTrainer(model, quiet_args(), masking, ExplodingDataset(), None, tokenizer)


def test_trl_features_mlx_cannot_run_are_refused_by_name_before_tokenizing(load_public, quiet_args) -> None:
    model, tokenizer = load_public()
    with pytest.raises(NotImplementedError) as refused:
        UnslothTrainer(
            model,
            quiet_args(),
            None,
            ExplodingDataset(),
            None,
            tokenizer,
            peft_config={"r": 16},
            compute_metrics=len,
            compute_loss_func=max,
            optimizers=(object(), None),
        )
    message = str(refused.value)
    assert message.startswith(
        "UnslothTrainer on MLX does not support peft_config, compute_metrics, compute_loss_func, optimizers ("
    )
    assert "FastLanguageModel.get_peft_model" in message
    trainer = UnslothTrainer(
        model,
        quiet_args(),
        train_dataset=[{"text": "a b"}],
        processing_class=tokenizer,
        peft_config=None,
        optimizers=(None, None),
    )
    assert len(trainer.train_rows) == 1


def test_trainer_level_trl_keywords_reach_the_config(load_public, quiet_args) -> None:
    model, tokenizer = load_public()
    rows = [{"body": chat_text(question, answer)} for question, answer in QUESTIONS]
    trainer = UnslothTrainer(
        model, tokenizer, rows, args=quiet_args(), dataset_text_field="body", max_seq_length=16, packing=False
    )
    assert (trainer.args.dataset_text_field, trainer.args.max_seq_length) == ("body", 16)
    assert int(trainer.train_rows.lengths.max()) == 16  # every chat row is longer than 16 tokens, so all were cut
    with pytest.raises(NotImplementedError, match="eval_packing=True"):
        UnslothTrainer(model, tokenizer, ExplodingDataset(), args=quiet_args(), eval_packing=True)


def test_context_length_precedence(load_public, chat_rows, quiet_args, caplog) -> None:
    caplog.set_level(logging.WARNING)
    model, tokenizer = load_public(max_seq_length=64)
    assert UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_seq_length=16)).args.max_seq_length == 16
    assert (
        UnslothTrainer(
            model, tokenizer, chat_rows, args=quiet_args(max_seq_length=None, max_length=32)
        ).args.max_seq_length
        == 64
    )
    caplog.clear()
    clamped = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_seq_length=10_000))
    # The model was loaded for 64 positions, so an explicit longer length is brought down to it.
    assert clamped.args.max_seq_length == 64
    assert "max_seq_length=10000 is longer than the model's maximum of 64 positions" in caplog.text
    from unsloth_zoo.mlx import load_model

    bare_model, _ = load_model(model.unsloth_source_path)  # no max_seq_length of its own
    assert (
        UnslothTrainer(
            bare_model, tokenizer, chat_rows, args=quiet_args(max_seq_length=None, max_length=32)
        ).args.max_seq_length
        == 32
    )
    bare_model.args.max_position_embeddings = 4096  # a longer limit, so the 1024 fallback can show
    assert (
        UnslothTrainer(bare_model, tokenizer, chat_rows, args=quiet_args(max_seq_length=None)).args.max_seq_length
        == 1024
    )


def test_no_eos_is_appended_by_default(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args())
    assert trainer.train_rows.source_rows[0].tolist() == tokenizer(chat_rows[0]["text"])["input_ids"]
    plain = [{"text": "The kettle sings"}]
    appended = UnslothTrainer(model, tokenizer, plain, args=quiet_args(append_eos=True))
    assert appended.train_rows.source_rows[0].tolist() == tokenizer("The kettle sings")["input_ids"] + [
        tokenizer.eos_token_id
    ]
    assert (trainer.args.grad_clip_mode, trainer.args.max_grad_norm) == ("global_norm", 1.0)
