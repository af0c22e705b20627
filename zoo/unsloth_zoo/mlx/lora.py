# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""LoRA on an mlx_lm model: freeze the base, swap the chosen linears (plain or quantized) for mlx_lm's LoRA layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# A plain attribute, not an mlx container, so the settings never show up among the model's parameters.
SETTINGS_ATTRIBUTE = "unsloth_lora_settings"


@dataclass(frozen=True)
class LoraSettings:
    rank: int
    alpha: float
    dropout: float
    num_layers: int
    keys: tuple
    # Where the base came from and how it was quantized, so a saved adapter can be put back on the same base.
    base_model: Optional[str] = None
    quantization: Optional[dict] = None

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def adapter_config(self) -> dict:
        """The `adapter_config.json` that mlx_lm's `load(..., adapter_path=...)` reads back."""
        base: Dict[str, Any] = {} if self.base_model is None else {"base_model_name_or_path": self.base_model}
        if self.quantization is not None:
            base["quantization"] = dict(self.quantization)
        return {
            **base,
            "fine_tune_type": "lora",
            "num_layers": self.num_layers,
            "lora_parameters": {
                "rank": self.rank,
                "scale": self.scale,
                "dropout": self.dropout,
                "keys": list(self.keys),
            },
        }


def _matching_keys(block: Any, targets: Sequence[str]) -> tuple:
    """Module paths inside a transformer block whose last name is one of `targets` (Hugging Face's naming)."""
    import mlx.nn as nn

    wanted = set(targets)
    return tuple(
        sorted(
            path
            for path, module in block.named_modules()
            if path.rsplit(".", 1)[-1] in wanted and isinstance(module, (nn.Linear, nn.QuantizedLinear))
        )
    )


def apply_lora(
    model: Any,
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
    target_modules: Sequence[str] = DEFAULT_TARGETS,
    num_layers: Optional[int] = None,
    base_model: Optional[str] = None,
    quantization: Optional[dict] = None,
) -> LoraSettings:
    """Freeze `model` and put LoRA on `target_modules` of its last `num_layers` blocks (all when None)."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    blocks = model.layers
    layers = len(blocks) if num_layers is None else int(num_layers)
    keys = _matching_keys(blocks[0], target_modules)
    if not keys:
        raise ValueError(f"no linear layer named any of {sorted(target_modules)} in the model's blocks")
    settings = LoraSettings(
        rank=int(rank),
        alpha=float(alpha),
        dropout=float(dropout),
        num_layers=layers,
        keys=keys,
        base_model=base_model,
        quantization=quantization,
    )
    model.freeze()
    linear_to_lora_layers(
        model, layers, {"rank": settings.rank, "scale": settings.scale, "dropout": settings.dropout, "keys": list(keys)}
    )
    setattr(model, SETTINGS_ATTRIBUTE, settings)
    return settings


def lora_settings(model: Any) -> Optional[LoraSettings]:
    return getattr(model, SETTINGS_ATTRIBUTE, None)
