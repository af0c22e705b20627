"""Issue 46 item 4: a notebook's collate_fn returning torch tensors (the Gemma 3n audio notebook's shape) trains on
MLX to the losses of the trainer's own padding on the same rows."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_a_vision_collate_fn_returning_torch_tensors_trains_as_the_vision_collator(tmp_path, quiet_args) -> None:
    """The same tokens, answer masks and pixel values, once through UnslothVisionDataCollator and once as a
    notebook's collate_fn hands them over: padded torch tensors with -100 labels."""
    import torch

    from tools.kits.tiny_vlm_model import BUILDERS
    from unsloth import FastVisionModel, UnslothVisionDataCollator

    from ..test_vision import rows

    folder = BUILDERS["qwen2_5_vl"](tmp_path / "qwen2_5_vl")

    def load() -> tuple:
        model, processor = FastVisionModel.from_pretrained(str(folder))
        return FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, random_state=3407), processor

    dataset = rows("qwen2_5_vl", repeats=2)
    model, processor = load()
    vision_collator = UnslothVisionDataCollator(model, processor)
    arguments = {"logging_steps": 1, "max_steps": 2, "dataset_kwargs": {"skip_prepare_dataset": True}}
    expected = logged_losses(UnslothTrainer(model, quiet_args(**arguments), vision_collator, dataset, None, processor))

    def collate_fn(examples: list) -> dict:
        encoded = [vision_collator.encode(example) for example in examples]
        width = max(len(row.ids) for row in encoded) + 3
        batch = {
            "input_ids": torch.zeros((len(encoded), width), dtype=torch.long),
            "attention_mask": torch.zeros((len(encoded), width), dtype=torch.long),
            "labels": torch.full((len(encoded), width), -100, dtype=torch.long),
        }
        for slot, row in enumerate(encoded):
            ids = torch.from_numpy(row.ids.astype(np.int64))
            batch["input_ids"][slot, : len(ids)] = ids
            batch["attention_mask"][slot, : len(ids)] = 1
            batch["labels"][slot, : len(ids)] = torch.where(torch.from_numpy(row.mask), ids, -100)
        for name in encoded[0].features:
            batch[name] = torch.cat([torch.from_numpy(np.asarray(row.features[name])) for row in encoded])
        return batch

    model, processor = load()
    trainer = UnslothTrainer(model, quiet_args(**arguments), collate_fn, dataset, None, processor.tokenizer)
    actual = logged_losses(trainer)
    assert len(actual) == len(expected) == 2
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6)


# The tiny Gemma 4 processor's 128 mel filters over a 512-point FFT leave some empty, as the real checkpoints' do.
@pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")
def test_the_gemma_audio_notebooks_collate_fn_trains_on_the_audio(tmp_path, quiet_args) -> None:
    """The Gemma 3N audio notebook's own collate_fn, word for word in shape: the processor's torch tensors of text and
    audio, padding masked in the labels; the audio tower reads its features (its LoRA weights move)."""
    import torch
    from mlx.utils import tree_flatten

    from tools.kits.tiny_vlm_model import build_tiny_gemma4
    from unsloth import FastModel

    from ..test_vision_audio import conversation, waveform

    model, processor = FastModel.from_pretrained(str(build_tiny_gemma4(tmp_path / "gemma4", audio=True)))
    model = FastModel.get_peft_model(model, finetune_audio_layers=True, r=8, lora_alpha=16, random_state=3407)
    dataset = [{**conversation(colour), "audio": {"array": waveform(colour)}} for colour in ("red", "blue") * 2]

    def collate_fn(examples: list) -> dict:
        texts = [processor.apply_chat_template(row["messages"], tokenize=False).strip() for row in examples]
        audios = [row["audio"]["array"] for row in examples]
        batch = processor(text=texts, audio=audios, return_tensors="pt", padding=True)
        # mlx-vlm's processor answers return_tensors="pt" with MLX arrays (the notebook's `.clone()` needs torch's).
        labels = torch.as_tensor(np.asarray(batch["input_ids"])).clone()
        labels[labels == processor.tokenizer.pad_token_id] = -100
        for name in ("image_token_id", "audio_token_id", "boi_token_id", "eoi_token_id"):
            if isinstance(getattr(processor.tokenizer, name, None), int):
                labels[labels == getattr(processor.tokenizer, name)] = -100
        batch["labels"] = labels
        return batch

    def tower() -> dict:
        return {
            name: np.asarray(value) for name, value in tree_flatten(model.trainable_parameters()) if "audio" in name
        }

    before = tower()
    arguments = {"logging_steps": 1, "max_steps": 2, "dataset_kwargs": {"skip_prepare_dataset": True}}
    trainer = UnslothTrainer(model, quiet_args(**arguments), collate_fn, dataset, None, processor.tokenizer)
    assert "input_features" in trainer.train_rows.features[0]
    losses = logged_losses(trainer)
    assert len(losses) == 2 and np.isfinite(losses).all()
    assert before and any(not np.array_equal(before[name], value) for name, value in tower().items())
