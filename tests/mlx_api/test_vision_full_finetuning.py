"""A vision model loaded with `full_finetuning=True` keeps every weight trainable: `get_peft_model` then adds no
LoRA and says so, as CUDA Unsloth's does (the PaddleOCR-VL notebook calls it after a full-finetuning load), and
`save_pretrained` writes the whole model, which loads back."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def paddle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import BUILDERS

    return BUILDERS["paddleocr_vl"](tmp_path_factory.mktemp("tiny-vlm") / "paddleocr_vl")


def _peft(model: object) -> object:
    from unsloth import FastVisionModel

    return FastVisionModel.get_peft_model(model, r=8, lora_alpha=8, target_modules=["q_proj", "fc1"])


def test_get_peft_model_after_a_full_finetuning_load_adds_no_lora(paddle_dir: Path, capsys) -> None:
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.lora import vision_lora_settings

    model, _ = FastVisionModel.from_pretrained(str(paddle_dir), full_finetuning=True)
    assert _peft(model) is model and vision_lora_settings(model) is None
    assert "Full finetuning is enabled, so .get_peft_model has no effect" in capsys.readouterr().out


def test_without_full_finetuning_it_still_adds_lora(paddle_dir: Path) -> None:
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.lora import vision_lora_settings

    model, _ = FastVisionModel.from_pretrained(str(paddle_dir), load_in_4bit=False)
    assert vision_lora_settings(_peft(model)) is not None


def test_save_pretrained_of_a_full_finetune_writes_the_model_that_loads_back(paddle_dir: Path, tmp_path: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(paddle_dir), full_finetuning=True)
    name, weight = next((n, w) for n, w in tree_flatten(model.parameters()) if n.endswith("q_proj.weight"))
    model.update(tree_unflatten([(name, weight + 1.0)]))  # as a training step would change it
    model.save_pretrained(str(tmp_path / "full"), processor)
    reloaded, _ = FastVisionModel.from_pretrained(str(tmp_path / "full"), full_finetuning=True)
    assert mx.array_equal(dict(tree_flatten(reloaded.parameters()))[name], weight + 1.0)


def test_get_peft_model_after_a_full_finetuning_load_still_takes_gradient_checkpointing(paddle_dir: Path) -> None:
    from unsloth import FastVisionModel
    from unsloth_zoo.mlx.checkpointing import wants_gradient_checkpointing

    model, _ = FastVisionModel.from_pretrained(str(paddle_dir), full_finetuning=True)
    model = FastVisionModel.get_peft_model(model, r=8, use_gradient_checkpointing="unsloth")
    assert wants_gradient_checkpointing(model)
