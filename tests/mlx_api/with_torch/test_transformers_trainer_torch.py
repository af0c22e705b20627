"""Issue 46 item 5: with torch installed, transformers' real `Trainer` given an MLX model trains it on MLX (as the
Orpheus, Llasa and DeepSeek-OCR notebooks call it), while a torch model still gets transformers' own trainer."""

from __future__ import annotations

import pytest

from unsloth import UnslothTrainer

from ..conftest import QUESTIONS

PROMPT_TOKENS = 3


def labelled_rows(tokenizer) -> list:
    rows = []
    for question, answer in QUESTIONS:
        ids = tokenizer(f"{question} {answer}")["input_ids"]
        rows.append({"input_ids": ids, "labels": [-100] * PROMPT_TOKENS + ids[PROMPT_TOKENS:]})
    return rows


def shared(tmp_path) -> dict:
    return dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        warmup_steps=0,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        save_strategy="no",
        seed=3407,
        report_to="none",
    )


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


@pytest.mark.parametrize("collator_name", ["DataCollatorForSeq2Seq", "collate_fn"])
def test_the_first_loss_of_transformers_trainer_is_sft_trainers(load_public, tmp_path, collator_name) -> None:
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments
    from trl import SFTConfig, SFTTrainer

    model, tokenizer = load_public(lora=True)

    def collate_fn(examples: list) -> dict:
        width = max(len(example["input_ids"]) for example in examples)
        pad = [[tokenizer.pad_token_id] * (width - len(example["input_ids"])) for example in examples]
        return {
            "input_ids": torch.tensor([row["input_ids"] + fill for row, fill in zip(examples, pad)]),
            "attention_mask": torch.tensor(
                [[1] * len(row["input_ids"]) + [0] * len(fill) for row, fill in zip(examples, pad)]
            ),
            "labels": torch.tensor([row["labels"] + [-100] * len(fill) for row, fill in zip(examples, pad)]),
        }

    collator = collate_fn if collator_name == "collate_fn" else getattr(transformers, collator_name)(tokenizer)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**shared(tmp_path)),
        train_dataset=labelled_rows(tokenizer),
        data_collator=collator,
        processing_class=tokenizer,
    )
    assert isinstance(trainer, UnslothTrainer)
    routed = first_loss(trainer)

    reference_model, _ = load_public(lora=True)
    reference = SFTTrainer(
        model=reference_model,
        args=SFTConfig(**shared(tmp_path)),
        train_dataset=labelled_rows(tokenizer),
        processing_class=tokenizer,
    )
    assert abs(routed - first_loss(reference)) <= 1e-6


def test_a_torch_model_keeps_transformers_trainer_and_a_subclass_refuses_an_mlx_model(
    load_public, tiny_model_dir, tmp_path
) -> None:
    import torch
    from transformers import LlamaForCausalLM, Seq2SeqTrainer, Trainer, TrainingArguments

    model, tokenizer = load_public()
    torch_model = LlamaForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    arguments = TrainingArguments(**shared(tmp_path), use_cpu=True)
    kept = Trainer(model=torch_model, args=arguments, train_dataset=labelled_rows(tokenizer))
    assert type(kept) is Trainer

    class WithOwnLoss(Trainer):
        def compute_loss(self, model, inputs, **kwargs):
            raise AssertionError("never reached on MLX")

    mlx_arguments = TrainingArguments(**shared(tmp_path))
    with pytest.raises(NotImplementedError, match="WithOwnLoss .a subclass of transformers' Trainer. cannot train"):
        WithOwnLoss(model=model, args=mlx_arguments, train_dataset=labelled_rows(tokenizer))
    assert isinstance(Seq2SeqTrainer(model, mlx_arguments, None, labelled_rows(tokenizer)), UnslothTrainer)


def test_predict_with_generate_on_a_text_model_is_refused_by_name(load_public, tmp_path) -> None:
    """Generation at evaluation is built for Whisper only; a text model would report logits-based metrics instead."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_public()
    arguments = Seq2SeqTrainingArguments(**shared(tmp_path), predict_with_generate=True, generation_max_length=16)
    with pytest.raises(NotImplementedError, match="predict_with_generate=True is built on MLX for Whisper only"):
        Seq2SeqTrainer(model, arguments, None, labelled_rows(tokenizer))
    plain = Seq2SeqTrainer(model, Seq2SeqTrainingArguments(**shared(tmp_path)), None, labelled_rows(tokenizer))
    assert plain.args.predict_with_generate is False
    with pytest.raises(NotImplementedError, match="trainer.predict on MLX is built for Whisper"):
        plain.predict(labelled_rows(tokenizer))
