"""`model.save_pretrained` writes PEFT's `adapter_model.safetensors` beside the mlx adapter, as CUDA Unsloth's does:
seven published notebooks (Qwen3-VL and Qwen 3.5 Vision GRPO, Gemma 4 GRPO, the Sudoku and 2048 games, Muse Glimmer)
open that file after `save_pretrained` to check the adapter trained. The folder still reloads on MLX."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten


def _nudged(model):
    """LoRA B away from its zero start, so the saved arrays say something."""
    weights = [(name, value + 0.01) for name, value in tree_flatten(model.trainable_parameters()) if "lora_b" in name]
    model.load_weights(weights, strict=False)
    return model


def _same_tensors(first: Path, second: Path) -> None:
    left, right = mx.load(str(first)), mx.load(str(second))
    assert left.keys() == right.keys() and left
    for name in left:
        assert np.array_equal(np.array(left[name]), np.array(right[name])), name


def test_a_text_adapter_saves_peft_files_and_reloads(load_public, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = load_public(lora=True)
    model = _nudged(model)
    folder, lora = tmp_path / "lora_model", tmp_path / "saved_lora"
    model.save_pretrained(str(folder))
    model.save_lora(str(lora))
    _same_tensors(folder / "adapter_model.safetensors", lora / "adapter_model.safetensors")
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["peft_type"] == "LORA" and config["r"] == 8 and config["lora_parameters"]["rank"] == 8
    assert (folder / "adapters.safetensors").is_file()

    tokens = mx.array([tokenizer("The kettle is")["input_ids"]])
    reloaded, _ = FastLanguageModel.from_pretrained(str(folder))
    assert np.allclose(np.array(model(tokens)), np.array(reloaded(tokens)), atol=1e-5)


def test_a_vision_adapter_saves_peft_files_and_reloads(tmp_path: Path) -> None:
    from tools.kits.tiny_vlm_model import BUILDERS
    from unsloth import FastVisionModel

    source = BUILDERS["qwen2_5_vl"](tmp_path / "qwen2_5_vl")
    model, processor = FastVisionModel.from_pretrained(str(source))
    model = _nudged(FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, random_state=3407))
    folder, lora = tmp_path / "grpo_lora", tmp_path / "saved_lora"
    model.save_pretrained(str(folder))
    processor.save_pretrained(str(folder))
    model.save_lora(str(lora))
    _same_tensors(folder / "adapter_model.safetensors", lora / "adapter_model.safetensors")
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["peft_type"] == "LORA" and config["unsloth_vision"]

    reloaded, _ = FastVisionModel.from_pretrained(str(folder))
    saved = dict(tree_flatten(model.trainable_parameters()))
    again = dict(tree_flatten(reloaded.trainable_parameters()))
    assert saved.keys() == again.keys()
    assert all(np.array_equal(np.array(saved[name]), np.array(again[name])) for name in saved)
