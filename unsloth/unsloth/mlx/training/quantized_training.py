# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Refuse to train a quantized base that has no LoRA: its weights cannot be trained, so only its norms would be."""

from __future__ import annotations

from typing import Any

from unsloth_zoo.mlx.lora import lora_settings

from ..models.quantize import model_quantization


def refuse_quantized_base_without_lora(model: Any) -> None:
    quantization = model_quantization(model)
    if quantization is None or lora_settings(model) is not None:
        return
    raise NotImplementedError(
        f"this model was loaded with {quantization.load_flag}=True and has no LoRA adapters, so training it "
        "would update only its norms; add adapters with get_peft_model(model, ...) first, or load it without "
        "load_in_4bit / load_in_8bit (full_finetuning=True) to train every weight"
    )
