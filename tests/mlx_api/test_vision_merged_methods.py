"""`save_pretrained_merged` on a vision model takes the save methods a text model takes: `merged_4bit` writes MLX's
4-bit format as `mlx_vlm.convert -q` does (the language model quantized in groups of 64, the towers left in floating
point), which `FastVisionModel` loads back; `lora` writes the adapter; `mxfp4` is refused by name, as for text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

FAMILIES = ("qwen2_5_vl", "pixtral")


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from tools.kits.tiny_vlm_model import BUILDERS

    root = tmp_path_factory.mktemp("tiny-vlm-merged")
    return {family: BUILDERS[family](root / family) for family in FAMILIES}


def _adapted(folder: Path) -> tuple:
    """The model with LoRA whose B matrices are non-zero, so the merge changes the weights."""
    import mlx.core as mx

    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(folder))
    model = FastVisionModel.get_peft_model(model, r=4, lora_alpha=8, finetune_vision_layers=True)
    mx.random.seed(1)
    for _, module in model.named_modules():
        if "lora_b" in module:
            module.lora_b = 0.05 * mx.random.normal(module.lora_b.shape)
    return model, processor


def _logits(model: Any, processor: Any) -> np.ndarray:
    import mlx.core as mx

    ids = processor.tokenizer("The kettle is red.", add_special_tokens=False)["input_ids"]
    return np.array(model(mx.array([ids])).astype(mx.float32))


@pytest.mark.parametrize("family", FAMILIES)
def test_merged_4bit_writes_mlx_4bit_that_loads_back(family: str, vlm_dirs: dict, tmp_path: Path) -> None:
    import mlx.nn as nn

    from unsloth import FastVisionModel

    model, processor = _adapted(vlm_dirs[family])
    folder = model.save_pretrained_merged(str(tmp_path / "four"), processor, save_method="merged_4bit")
    config = json.loads((Path(folder) / "config.json").read_text())
    assert (config["quantization"]["bits"], config["quantization"]["group_size"]) == (4, 64)
    four, _ = FastVisionModel.from_pretrained(str(folder))
    kinds = {type(module).__name__ for _, module in four.language_model.named_modules()}
    assert "QuantizedLinear" in kinds and "Linear" not in kinds
    tower = [module for _, module in four.named_modules() if isinstance(module, nn.QuantizedLinear)]
    assert len(tower) < len([m for _, m in model.named_modules() if isinstance(m, (nn.Linear, nn.QuantizedLinear))])
    assert not any(isinstance(module, nn.QuantizedLinear) for _, module in four.vision_tower.named_modules())
    # The float merge quantized by hand, language model only, computes the same logits.
    model.save_pretrained_merged(str(tmp_path / "float"), processor, save_method="merged_32bit")
    by_hand, _ = FastVisionModel.from_pretrained(str(tmp_path / "float"))
    nn.quantize(
        by_hand.language_model,
        group_size=64,
        bits=4,
        class_predicate=lambda path, module: hasattr(module, "to_quantized") and module.weight.shape[-1] % 64 == 0,
    )
    np.testing.assert_allclose(_logits(four, processor), _logits(by_hand, processor), atol=1e-4)
    assert type(model.language_model.layers[0].self_attn.q_proj).__name__ != "QuantizedLinear"  # untouched


def test_lora_method_writes_the_adapter(vlm_dirs: dict, tmp_path: Path) -> None:
    from unsloth import FastVisionModel

    model, processor = _adapted(vlm_dirs["qwen2_5_vl"])
    model.save_pretrained_merged(str(tmp_path / "lora"), processor, save_method="lora")
    assert (tmp_path / "lora" / "adapter_config.json").is_file()
    reloaded, _ = FastVisionModel.from_pretrained(str(tmp_path / "lora"))
    np.testing.assert_allclose(_logits(reloaded, processor), _logits(model, processor), atol=1e-5)


def test_mxfp4_is_refused_by_name_as_for_text(vlm_dirs: dict, tmp_path: Path) -> None:
    model, processor = _adapted(vlm_dirs["qwen2_5_vl"])
    with pytest.raises(NotImplementedError, match=r"save_method='mxfp4' is for gpt-oss models"):
        model.save_pretrained_merged(str(tmp_path / "mx"), processor, save_method="mxfp4")
