"""A vision processor called with an unrendered conversation renders it with its chat template first, as CUDA
Unsloth's processors do: the Qwen3-VL and Qwen 3.5 Vision GRPO notebooks call `tokenizer(image, prompt)` with the
prompt column's conversation. The patched processor still pickles (datasets' fingerprints, workers) as itself."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest

CONVERSATION = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which colour?"}]}]


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tools.kits.tiny_vlm_model import BUILDERS
    from unsloth import FastVisionModel

    folder = BUILDERS["qwen2_5_vl"](tmp_path_factory.mktemp("tiny-vlm") / "qwen2_5_vl")
    _, processor = FastVisionModel.from_pretrained(str(folder))
    return processor


def _ids(output: Any) -> list:
    import numpy as np

    return np.asarray(output["input_ids"]).tolist()


def _square() -> Any:
    from PIL import Image

    return Image.new("RGB", (56, 56), (220, 30, 30))


def test_a_conversation_is_rendered_with_the_generation_prompt(processor) -> None:
    image = _square()
    rendered = processor.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    expected = _ids(processor(image, rendered, add_special_tokens=False))
    assert _ids(processor(image, CONVERSATION, add_special_tokens=False)) == expected
    assert _ids(processor(images=image, text=CONVERSATION, add_special_tokens=False)) == expected


def test_add_generation_prompt_false_is_honoured_and_text_passes_unchanged(processor) -> None:
    image = _square()
    plain = processor.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=False)
    asked = _ids(processor(image, CONVERSATION, add_special_tokens=False, add_generation_prompt=False))
    assert asked == _ids(processor(image, plain, add_special_tokens=False))
    expected = processor.tokenizer(["Which colour?"], add_special_tokens=False)
    assert _ids(processor(text="Which colour?", add_special_tokens=False)) == _ids(expected)


def test_the_processor_pickles_and_copies_as_its_own_class(processor, tmp_path: Path) -> None:
    from datasets.fingerprint import Hasher

    base = type(processor).__mro__[1]
    assert type(pickle.loads(pickle.dumps(processor))) is base
    assert type(copy.deepcopy(processor)) is base
    assert Hasher.hash(processor) == Hasher.hash(processor)
    processor.save_pretrained(str(tmp_path / "saved"))
    assert f'"processor_class": "{base.__name__}"' in (tmp_path / "saved" / "processor_config.json").read_text()
