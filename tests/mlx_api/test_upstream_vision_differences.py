"""Upstream's MLX test file, the vision items (issue 35, item 6): the processor a vision collator carries, the
collator in CUDA Unsloth's positional order, and vision rows trained without a collator (tiny Qwen 2.5 VL)."""

from __future__ import annotations

import pytest

from unsloth import UnslothTrainer, UnslothTrainingArguments

from .test_vision import conversation, load, rows, vision_dirs  # noqa: F401  (the session fixture)


def test_with_a_vision_collator_the_processor_is_the_collators(vision_dirs, tmp_path) -> None:  # noqa: F811
    from unsloth import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    trainer = UnslothTrainer(
        model=model,
        processing_class=processor.tokenizer,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows("qwen2_5_vl", 1),
        args=UnslothTrainingArguments(output_dir=str(tmp_path), max_steps=1, save_strategy="no"),
    )
    assert trainer.processor is processor and trainer.processing_class is processor.tokenizer


def test_the_collator_takes_cudas_positional_order(vision_dirs, tmp_path) -> None:  # noqa: F811
    from unsloth import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    # model, processor, max_seq_length, formatting_func, resize, ignore_index, train_on_responses_only,
    # instruction_part, response_part, force_match, num_proc, completion_only_loss
    collator = UnslothVisionDataCollator(model, processor, 200, None, "max", -100, False, None, None, True, None, False)
    assert (collator.max_seq_length, collator.resize, collator.completion_only_loss) == (200, "max", False)
    trainer = UnslothTrainer(
        model=model,
        processing_class=processor,
        data_collator=collator,
        train_dataset=rows("qwen2_5_vl", 1),
        args=UnslothTrainingArguments(output_dir=str(tmp_path), max_steps=1, save_strategy="no"),
    )
    assert (trainer.args.max_seq_length, trainer.args.image_size) == (200, "max")
    assert trainer.args.completion_only_loss is False
    with pytest.raises(ValueError, match="train_on_responses_only=True needs response_part"):
        UnslothVisionDataCollator(model, processor, None, None, "min", -100, True)
    marked = UnslothVisionDataCollator(model, processor, None, None, "min", -100, True, "<|im_start|>user", "assistant")
    assert marked.markers == ("<|im_start|>user", "assistant")


def test_an_explicit_completion_only_loss_in_the_args_wins_over_the_collator(vision_dirs, tmp_path) -> None:  # noqa: F811
    from unsloth import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    trainer = UnslothTrainer(
        model=model,
        processing_class=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows("qwen2_5_vl", 1),
        args=UnslothTrainingArguments(
            output_dir=str(tmp_path), max_steps=1, save_strategy="no", completion_only_loss=False
        ),
    )
    assert trainer.args.completion_only_loss is False and trainer.args.image_size == "min"


def test_vision_rows_without_a_collator_train_through_one_built_for_them(vision_dirs, tmp_path) -> None:  # noqa: F811
    from unsloth import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    trainer = UnslothTrainer(
        model=model,
        processing_class=processor,
        train_dataset=[conversation("qwen2_5_vl", "red"), conversation("qwen2_5_vl", "blue")],
        args=UnslothTrainingArguments(output_dir=str(tmp_path), max_steps=1, save_strategy="no"),
    )
    assert isinstance(trainer.data_collator, UnslothVisionDataCollator)
    assert trainer.data_collator.processor is processor and trainer.processor is processor
    assert trainer.train().global_step == 1
