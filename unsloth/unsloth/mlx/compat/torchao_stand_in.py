# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The QAT notebooks' torchao cell on MLX: `quantize_(model, QATConfig(step="convert"))` converts a model trained
with `qat_scheme` into MLX's quantized layers. Without torchao (it needs torch) a stand-in answers the imports; an
installed torchao keeps its own `quantize_` for torch models and hands MLX models to ours.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

MODULES = ("torchao", "torchao.quantization", "torchao.quantization.qat")


class QATConfig:
    """torchao's QATConfig as the notebooks spell it: a base config to prepare with, or `step="convert"`."""

    def __init__(self, base_config: Any = None, step: str = "prepare", **options: Any) -> None:
        self.base_config, self.step, self.options = base_config, step, options


class Int4WeightOnlyConfig:
    """torchao's int4 weight-only config, named by the notebooks' post-training save cells."""

    def __init__(self, group_size: int = 128, **options: Any) -> None:
        self.group_size, self.options = group_size, options


def _is_mlx_model(model: Any) -> bool:
    import mlx.nn as nn

    return isinstance(model, nn.Module)


def convert_mlx(model: Any, config: Any) -> None:
    """The convert step on an MLX model trained with `qat_scheme`; anything else is refused by name."""
    from unsloth_zoo.mlx.qat import qat_scheme

    from ..models.quantize import convert_qat_model

    if getattr(config, "step", None) != "convert" or qat_scheme(model) is None:
        raise NotImplementedError(
            f"torchao's quantize_(model, {type(config).__name__}(...)) on an MLX model: only the convert step "
            "(QATConfig(step='convert')) of a model trained with get_peft_model(qat_scheme=...) is available; "
            "save_pretrained_merged(save_method='merged_4bit') quantizes any other model in MLX's format"
        )
    convert_qat_model(model)


def quantize_(model: Any, config: Any, filter_fn: Any = None, device: Optional[Any] = None) -> None:
    convert_mlx(model, config)


def fill_torchao(module: ModuleType) -> None:
    module.__path__ = []
    if module.__name__ == "torchao":
        module.quantize_ = quantize_
    elif module.__name__ == "torchao.quantization":
        module.quantize_, module.Int4WeightOnlyConfig = quantize_, Int4WeightOnlyConfig
    else:
        module.QATConfig = QATConfig


def patch_torchao_quantize(module: ModuleType) -> None:
    """An installed torchao's `quantize_` hands MLX models to the convert step here."""
    own = module.quantize_
    if getattr(own, "__unsloth_mlx__", False):
        return

    def quantize(model: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_mlx_model(model):
            return convert_mlx(model, config)
        return own(model, config, *args, **kwargs)

    quantize.__unsloth_mlx__ = True  # type: ignore[attr-defined]
    module.quantize_ = quantize
