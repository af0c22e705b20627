"""`load_in_fp8=True` (the FP8 GRPO notebooks' load) quantizes the base to MLX's `mxfp8` (8-bit floats, one shared
power-of-two scale per 32 weights), as upstream's own MLX loader maps it; LoRA trains on it, the first loss stays
within 1e-2 of the 16-bit base's, and a saved adapter reloads onto an `mxfp8` base again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def _first_loss(load_public, chat_rows, quiet_args, **load) -> float:
    from unsloth import UnslothTrainer

    model, tokenizer = load_public(lora=True, **load)
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_steps=1, logging_steps=1))
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def test_load_in_fp8_quantizes_every_linear_to_mxfp8(load_public) -> None:
    import mlx.nn as nn

    model, _ = load_public(load_in_4bit=False, load_in_fp8=True)
    linears = [module for _, module in model.named_modules() if isinstance(module, nn.QuantizedLinear)]
    assert len(linears) == 2 * 7
    assert {(module.bits, module.group_size, module.mode) for module in linears} == {(8, 32, "mxfp8")}
    assert not [path for path, module in model.named_modules() if type(module) is nn.Linear]


def test_first_loss_on_an_fp8_base_is_within_1e_2_of_the_16_bit_base(load_public, chat_rows, quiet_args) -> None:
    full = _first_loss(load_public, chat_rows, quiet_args, load_in_4bit=False)
    fp8 = _first_loss(load_public, chat_rows, quiet_args, load_in_4bit=False, load_in_fp8=True)
    assert fp8 != full and abs(fp8 - full) < 1e-2, (fp8, full)


def test_fast_model_takes_load_in_fp8_over_its_4_bit_default(tiny_model_dir: Path) -> None:
    import mlx.nn as nn

    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(tiny_model_dir), load_in_fp8=True)
    assert model.layers[0].self_attn.q_proj.mode == "mxfp8" and isinstance(model.layers[0].mlp.up_proj, nn.Module)


def test_an_fp8_adapter_reloads_onto_an_fp8_base(load_public, chat_rows, quiet_args, tmp_path: Path) -> None:
    import mlx.core as mx

    from unsloth import FastLanguageModel, UnslothTrainer

    model, tokenizer = load_public(lora=True, load_in_fp8=True)
    UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_steps=2)).train()
    model.save_pretrained(str(tmp_path / "adapter"))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["quantization"] == {"bits": 8, "group_size": 32, "mode": "mxfp8"}
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "adapter"))
    assert reloaded.layers[0].self_attn.q_proj.linear.mode == "mxfp8"
    ids = mx.array([tokenizer("The kettle is red.", add_special_tokens=False)["input_ids"]])
    np.testing.assert_array_equal(np.array(reloaded(ids)), np.array(model(ids)))


def test_merged_save_of_an_fp8_base_is_float(load_public, tmp_path: Path) -> None:
    import mlx.core as mx

    model, tokenizer = load_public(lora=True, load_in_fp8=True)
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_16bit")
    saved = mx.load(str(tmp_path / "merged" / "model.safetensors"))
    assert not [name for name in saved if name.endswith(".scales")]


def test_fp8_with_4_or_8_bit_is_refused(tiny_model_dir: Path) -> None:
    from unsloth import FastLanguageModel

    with pytest.raises(ValueError, match="choose one"):
        FastLanguageModel.from_pretrained(str(tiny_model_dir), load_in_8bit=True, load_in_fp8=True)


def test_fast_vision_model_quantizes_its_language_model_to_mxfp8(tmp_path: Path) -> None:
    import mlx.nn as nn

    from tools.kits.tiny_vlm_model import build_tiny_qwen25_vl
    from unsloth import FastVisionModel

    model, _ = FastVisionModel.from_pretrained(str(build_tiny_qwen25_vl(tmp_path / "vlm")), load_in_fp8=True)
    language = [m for _, m in model.language_model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    assert language and {(m.bits, m.group_size, m.mode) for m in language} == {(8, 32, "mxfp8")}
    assert not [m for _, m in model.vision_tower.named_modules() if isinstance(m, nn.QuantizedLinear)]
