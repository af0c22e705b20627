"""`auto_model` on a vision checkpoint: the class its remote code maps an Auto class to (`auto_map` in config.json)
is its own, so PaddleOCR-VL's notebook load (`auto_model=AutoModelForCausalLM`, `trust_remote_code=True`) builds
the whole model with its tower, through `FastVisionModel` and `FastModel` alike; an Auto class the checkpoint does
not map to itself is still refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def paddle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import BUILDERS

    return BUILDERS["paddleocr_vl"](tmp_path_factory.mktemp("tiny-vlm") / "paddleocr_vl")


@pytest.fixture
def unmapped_dir(paddle_dir: Path, tmp_path: Path) -> Path:
    """The same checkpoint with its `auto_map` taken out, as a folder without remote code has it."""
    folder = Path(shutil.copytree(paddle_dir, tmp_path / "unmapped"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_the_auto_class_its_remote_code_maps_loads_the_vision_model(paddle_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.backend import vision_tower

    with pytest.warns(RuntimeWarning, match="trust_remote_code has no effect on MLX"):
        model, processor = FastVisionModel.from_pretrained(
            str(paddle_dir), full_finetuning=True, auto_model=AutoModelForCausalLM, trust_remote_code=True
        )
    assert vision_tower(model) is not None and hasattr(processor, "image_processor")


def test_fast_model_takes_it_too(paddle_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    from unsloth import FastModel
    from unsloth.mlx.vision.backend import vision_tower

    model, _ = FastModel.from_pretrained(str(paddle_dir), load_in_4bit=False, auto_model=AutoModelForCausalLM)
    assert vision_tower(model) is not None


@pytest.mark.parametrize("entry", ["FastVisionModel", "FastModel"])
def test_an_auto_class_the_checkpoint_does_not_map_is_refused_by_name(unmapped_dir: Path, entry: str) -> None:
    import unsloth
    from transformers import AutoModelForCausalLM

    with pytest.raises(NotImplementedError, match=rf"{entry}\.from_pretrained.*auto_model=AutoModelForCausalLM"):
        getattr(unsloth, entry).from_pretrained(str(unmapped_dir), load_in_4bit=False, auto_model=AutoModelForCausalLM)


def test_the_image_text_auto_class_still_loads(unmapped_dir: Path) -> None:
    from transformers import AutoModelForImageTextToText

    from unsloth import FastVisionModel

    model, _ = FastVisionModel.from_pretrained(str(unmapped_dir), auto_model=AutoModelForImageTextToText)
    assert model is not None
