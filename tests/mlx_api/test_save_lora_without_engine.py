"""`model.save_lora` without vLLM's keywords (`fast_inference=False`), as the LFM2.5 GRPO notebook calls it after
training: CUDA Unsloth gives every LoRA model the call, so it writes PEFT's adapter here too."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest


def test_save_lora_writes_the_adapter_after_a_plain_load(load_public, tmp_path: Path) -> None:
    model, _ = load_public(lora=True, fast_inference=False)
    folder = tmp_path / "grpo_saved_lora"
    model.save_lora(str(folder))
    weights = mx.load(str(folder / "adapter_model.safetensors"))
    assert weights and all(name.startswith("base_model.model.") for name in weights)
    assert any(name.endswith("lora_A.weight") for name in weights)
    assert json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))["peft_type"] == "LORA"


def test_save_lora_before_get_peft_model_is_refused_by_name(load_public, tmp_path: Path) -> None:
    model, _ = load_public()
    with pytest.raises(ValueError, match="save_lora needs a LoRA model"):
        model.save_lora(str(tmp_path / "none"))
