# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A Whisper LoRA adapter saved as PEFT saves one for transformers' Whisper, so PEFT (and CUDA Unsloth) load it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

import mlx.core as mx

from .whisper import ATTENTIONS, MLX_NAMES, SOURCE_ATTRIBUTE

LORA_SETTINGS_ATTRIBUTE = "_unsloth_whisper_lora"
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
# mlx-audio's attention names -> transformers'.
HF_ATTENTIONS = {"attn": "self_attn", "cross_attn": "encoder_attn"}
HF_LINEARS = {mlx: hf for hf, mlx in MLX_NAMES.items()}
PEFT_PREFIX = "base_model.model.model."


def _adapted(model: Any) -> Iterator[Tuple[str, Any]]:
    """(transformers' module path, LoRA layer) for each wrapped linear."""
    for stack in ("encoder", "decoder"):
        for index, block in enumerate(getattr(model, stack).blocks):
            owners = [(f"{stack}.layers.{index}", block)]
            owners += [
                (f"{stack}.layers.{index}.{HF_ATTENTIONS[name]}", getattr(block, name))
                for name in ATTENTIONS
                if getattr(block, name, None) is not None
            ]
            for path, owner in owners:
                for mlx_name, hf_name in HF_LINEARS.items():
                    layer = getattr(owner, mlx_name, None)
                    if layer is not None and "lora_a" in layer:
                        yield f"{path}.{hf_name}", layer


def peft_tensors(model: Any) -> Dict[str, mx.array]:
    """PEFT's names and layouts for Whisper's adapted linears."""
    return lora_tensors(PEFT_PREFIX, _adapted(model))


def lora_tensors(prefix: str, adapted: Iterable[Tuple[str, Any]]) -> Dict[str, mx.array]:
    """lora_A (rank, in) and lora_B (out, rank), the transposes of mlx-lm's, under `prefix` + transformers' path."""
    tensors = {}
    for path, layer in adapted:
        tensors[f"{prefix}{path}.lora_A.weight"] = mx.contiguous(layer.lora_a.T)
        tensors[f"{prefix}{path}.lora_B.weight"] = mx.contiguous(layer.lora_b.T)
    return tensors


def write_peft_adapter(
    save_directory: str | Path, tensors: Dict[str, mx.array], settings: Optional[Dict[str, Any]], source: Any, kind: str
) -> None:
    """PEFT's adapter files (`task_type=None`, as the speech notebooks set it) for a model LoRA was put on."""
    if settings is None:
        raise NotImplementedError(
            f"model.save_pretrained on a {kind} without LoRA: saving {kind}'s full weights is not built on MLX yet; "
            "call FastModel.get_peft_model(model, ...) first to train and save an adapter"
        )
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / WEIGHTS_FILE), tensors, metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": source,
        "bias": "none",
        "inference_mode": True,
        **settings,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def save_whisper_adapter(model: Any, save_directory: str | Path, **_: Any) -> None:
    """`model.save_pretrained(folder)` on a Whisper with LoRA: PEFT's adapter files."""
    settings = getattr(model, LORA_SETTINGS_ATTRIBUTE, None)
    tensors = peft_tensors(model) if settings is not None else {}
    write_peft_adapter(save_directory, tensors, settings, getattr(model, SOURCE_ATTRIBUTE, None), "Whisper")
