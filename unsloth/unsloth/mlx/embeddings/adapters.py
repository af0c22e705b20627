# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A saved PEFT adapter folder put back on its MLX base: the LoRA layers `save_pretrained` wrote, by Hub name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx

from unsloth_zoo.mlx.lora import apply_lora

PEFT_PREFIX = "base_model.model."
ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(folder: Path) -> bool:
    """PEFT's layout as `save_pretrained` writes it: an adapter config and no model config of its own."""
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def read_adapter_config(folder: Path) -> Dict[str, Any]:
    return json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))


def block_relative_targets(targets: List[str], blocks: str, prefix: str) -> List[str]:
    """Hub module paths (`encoder.layer.0.attention.self.query`) as the names inside a block LoRA matches."""
    within = blocks[len(prefix) :] if prefix and blocks.startswith(prefix) else blocks
    names = []
    for target in targets:
        head, _, rest = target.partition(within + ".")
        names.append(rest.split(".", 1)[1] if rest and not head else target)
    return list(dict.fromkeys(names))


def load_adapter(model: Any, folder: Path) -> None:
    """LoRA as the folder's adapter_config.json says, then its weights (lora_A / lora_B, transposed to MLX's)."""
    config = read_adapter_config(folder)
    family = model.family
    targets = block_relative_targets(list(config["target_modules"]), family.blocks, family.prefix)
    apply_lora(model, rank=int(config["r"]), alpha=float(config["lora_alpha"]), target_modules=targets)
    weights = mx.load(str(folder / "adapter_model.safetensors"))
    loaded = []
    for name, value in weights.items():
        hub, _, part = name[len(PEFT_PREFIX) :].rpartition(".lora_")
        kind = part.split(".", 1)[0]
        loaded.append((f"backbone.{family.prefix}{hub}.lora_{kind.lower()}", value.T))
    model.load_weights(loaded, strict=False)
    mx.eval(model.parameters())
