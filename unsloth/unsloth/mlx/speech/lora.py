# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""LoRA on Whisper under transformers' module names, as PEFT places it: `q_proj` reaches every attention's query,
self and cross, in the encoder and the decoder."""

from __future__ import annotations

import math
from typing import Any, Iterator, List, Sequence, Tuple

import mlx.core as mx

from .saving import LORA_SETTINGS_ATTRIBUTE
from .whisper import ATTENTIONS, MLX_NAMES


def _linears(model: Any, name: str) -> Iterator[Tuple[Any, str]]:
    """(owner, attribute) of every linear transformers would call `name`, in both stacks."""
    own = MLX_NAMES[name]
    for block in [*model.encoder.blocks, *model.decoder.blocks]:
        if own.startswith("mlp"):
            yield block, own
            continue
        for attention in ATTENTIONS:
            owner = getattr(block, attention, None)
            if owner is not None:
                yield owner, own


def whisper_targets(target_modules: Sequence[str] | str | None) -> List[str]:
    if target_modules is None:
        return ["q_proj", "v_proj"]
    names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    unknown = sorted(set(names) - set(MLX_NAMES))
    if unknown:
        raise ValueError(
            f"target_modules {', '.join(unknown)} name no linear of Whisper; its adaptable names are "
            f"{', '.join(MLX_NAMES)}"
        )
    return names


def apply_whisper_lora(
    model: Any, targets: Sequence[str], r: int, alpha: float, dropout: float, seed: int, rslora: bool
) -> Any:
    """Freeze the model and wrap each targeted linear with mlx-lm's LoRALinear (B starts at zero, as PEFT's)."""
    from mlx_lm.tuner.lora import LoRALinear

    model.freeze()
    mx.random.seed(int(seed))
    scale = alpha / math.sqrt(r) if rslora else alpha / r
    for name in targets:
        for owner, attribute in _linears(model, name):
            setattr(
                owner, attribute, LoRALinear.from_base(getattr(owner, attribute), r=r, dropout=dropout, scale=scale)
            )
    settings = {"r": r, "lora_alpha": alpha, "lora_dropout": dropout, "target_modules": list(targets)}
    setattr(model, LORA_SETTINGS_ATTRIBUTE, {**settings, "use_rslora": rslora})
    return model
