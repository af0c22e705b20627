"""`UnslothVisionDataCollator(train_on_responses_only=True, instruction_part=..., response_part=...)`, as the
PaddleOCR-VL notebook builds it: only the text after each response marker, up to the next instruction marker,
is trained (the answer and its end of sentence), and `pad_to_multiple_of` rounds a batch's width up."""

from __future__ import annotations


import numpy as np
import pytest

ANSWER = "A red square."


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    from tools.kits.tiny_vlm_model import BUILDERS

    from unsloth import FastVisionModel

    folder = BUILDERS["paddleocr_vl"](tmp_path_factory.mktemp("tiny-vlm") / "paddleocr_vl")
    return FastVisionModel.from_pretrained(str(folder), load_in_4bit=False)


def _row(turns: int = 1) -> dict:
    """One image in the first question (mlx-vlm's PaddleOCR-VL processor takes one image per row), `turns` answers."""
    from PIL import Image

    image = {"type": "image", "image": Image.new("RGB", (56, 56), (200, 30, 30))}
    messages = []
    for turn in range(turns):
        question = [{"type": "text", "text": "OCR:"}] + ([image] if turn == 0 else [])
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": ANSWER}]})
    return {"messages": messages}


def _collator(loaded: tuple, **options) -> object:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = loaded
    return UnslothVisionDataCollator(
        model=model,
        processor=processor,
        train_on_responses_only=True,
        instruction_part="User:",
        response_part="\nAssistant:",
        **options,
    )


def _targets(loaded: tuple, row: dict, **options) -> str:
    encoded = _collator(loaded, **options).encode(row)
    return loaded[1].tokenizer.decode(encoded.ids[encoded.mask].tolist())


def test_only_the_text_after_each_response_marker_trains(loaded: tuple) -> None:
    assert _targets(loaded, _row()) == f" {ANSWER}<|end_of_sentence|>"
    assert _targets(loaded, _row(2)) == f" {ANSWER}<|end_of_sentence|> {ANSWER}<|end_of_sentence|>"


def test_pad_to_multiple_of_rounds_the_batch_width_up(loaded: tuple) -> None:
    batch = _collator(loaded, pad_to_multiple_of=8, ignore_index=-100, max_seq_length=2048)([_row(), _row(2)])
    width = batch["input_ids"].shape[1]
    assert width % 8 == 0 and width - int(batch["attention_mask"].sum(axis=1).max()) < 8
    assert np.all(batch["labels"][batch["attention_mask"] == 0] == -100)


def test_a_response_marker_the_rows_never_hold_is_refused_by_name(loaded: tuple) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    collator = UnslothVisionDataCollator(
        loaded[0], loaded[1], train_on_responses_only=True, instruction_part="<user>", response_part="<bot>"
    )
    with pytest.raises(ValueError, match="response_part='<bot>'"):
        collator.encode(_row())


def test_train_on_responses_only_needs_its_response_part(loaded: tuple) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    with pytest.raises(ValueError, match="train_on_responses_only=True needs response_part"):
        UnslothVisionDataCollator(loaded[0], loaded[1], train_on_responses_only=True)


def test_the_muse_glimmer_notebooks_markers_train_its_answers_only(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The Muse Glimmer Vision notebook's own markers on its family's template (two answers, one image)."""
    from tools.kits.tiny_vlm_model import BUILDERS

    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    folder = BUILDERS["muse_glimmer"](tmp_path_factory.mktemp("tiny-vlm") / "muse_glimmer")
    model, processor = FastVisionModel.from_pretrained(str(folder), load_in_4bit=False)
    collator = UnslothVisionDataCollator(
        model,
        processor,
        train_on_responses_only=True,
        instruction_part="<|start|>user<|message|>",
        response_part="<|start|>assistant to=user<|message|>",
    )
    encoded = collator.encode(_row(2))
    answers = processor.tokenizer.decode(encoded.ids[encoded.mask].tolist())
    assert answers.count(ANSWER) == 2 and "OCR:" not in answers and "assistant" not in answers, answers


def test_the_trainer_pads_its_batches_to_the_collators_multiple(loaded: tuple, tmp_path) -> None:
    """The PaddleOCR-VL notebook sets pad_to_multiple_of on the collator: the MLX trainer, which pads its own
    batches, pads them to that multiple too."""
    from trl import SFTConfig, SFTTrainer

    model, processor = loaded
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=_collator(loaded, pad_to_multiple_of=8),
        train_dataset=[_row(), _row(2)],
        args=SFTConfig(
            per_device_train_batch_size=2,
            max_steps=1,
            output_dir=str(tmp_path / "out"),
            report_to="none",
            save_strategy="no",
            remove_unused_columns=False,
            dataset_text_field="",
            dataset_kwargs={"skip_prepare_dataset": True},
        ),
    )
    assert trainer.args.pad_to_multiple_of == 8
