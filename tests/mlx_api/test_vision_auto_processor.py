"""The PaddleOCR-VL notebook loads its processor again through transformers' `AutoProcessor` (which mlx-vlm points
at its own class) and calls it as a Hugging Face processor: `processor(image, text, add_special_tokens=False)`.
That processor answers as the one `FastVisionModel.from_pretrained` returns: the same call, the same tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR:"}]}]


@pytest.fixture(scope="module")
def paddle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import BUILDERS

    return BUILDERS["paddleocr_vl"](tmp_path_factory.mktemp("tiny-vlm") / "paddleocr_vl")


def _square() -> object:
    from PIL import Image

    return Image.new("RGB", (56, 56), (200, 30, 30))


def test_auto_processor_takes_the_hugging_face_call(paddle_dir: Path) -> None:
    from transformers import AutoProcessor

    from unsloth import FastVisionModel

    _, own = FastVisionModel.from_pretrained(str(paddle_dir), load_in_4bit=False)
    processor = AutoProcessor.from_pretrained(str(paddle_dir))
    text = processor.tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    inputs = processor(_square(), text, add_special_tokens=False, return_tensors="np")
    expected = own(_square(), text, add_special_tokens=False, return_tensors="np")
    assert np.array_equal(inputs["input_ids"], expected["input_ids"])
    assert inputs["pixel_values"].shape == expected["pixel_values"].shape


def test_auto_processor_renders_text_and_conversations_as_the_own_one_does(paddle_dir: Path) -> None:
    from transformers import AutoProcessor

    from unsloth import FastVisionModel

    _, own = FastVisionModel.from_pretrained(str(paddle_dir), load_in_4bit=False)
    processor = AutoProcessor.from_pretrained(str(paddle_dir))
    rendered = processor.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert rendered == own.apply_chat_template(MESSAGES, add_generation_prompt=True) and isinstance(rendered, str)
    assert np.array_equal(
        processor(_square(), MESSAGES, return_tensors="np")["input_ids"],
        own(_square(), rendered, return_tensors="np")["input_ids"],
    )
