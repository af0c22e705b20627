# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`load_in_4bit` / `load_in_8bit` on MLX: affine quantization of the base with `mlx.nn.quantize`, and its undoing.

Every layer mlx can quantize (linears, the embedding, mlx_lm's SwitchLinear expert stacks) whose input width is a
multiple of the group size is quantized, as mlx_lm's own quantize picks them (QLoRA puts LoRA on top); exports that need plain weights (merged safetensors, GGUF) work on a dequantized copy, so the
model being trained is never changed by saving it.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

GROUP_SIZE = 64
QUANTIZATION_ATTRIBUTE = "unsloth_quantization"


@dataclass(frozen=True)
class Quantization:
    """How the base was quantized; a plain object, so mlx never counts it among the model's parameters."""

    bits: int
    group_size: int = GROUP_SIZE

    def as_dict(self) -> Dict[str, int]:
        return asdict(self)


def requested_bits(load_in_4bit: Any, load_in_8bit: Any) -> Optional[int]:
    """4, 8 or None; asking for both is an error rather than a silent choice."""
    if load_in_4bit and load_in_8bit:
        raise ValueError("load_in_4bit=True and load_in_8bit=True were both given; choose one")
    if load_in_4bit:
        return 4
    if load_in_8bit:
        return 8
    return None


def _quantizable(path: str, module: Any) -> bool:
    weight = getattr(module, "weight", None)
    return hasattr(module, "to_quantized") and weight is not None and weight.shape[-1] % GROUP_SIZE == 0


def _quantized_kinds() -> tuple:
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    return (nn.QuantizedLinear, nn.QuantizedEmbedding, QuantizedSwitchLinear)


def quantize_model(model: Any, bits: int) -> Any:
    """Quantize `model` in place to `bits` (4 or 8) with group size 64; returns it."""
    if bits not in (4, 8):
        raise ValueError(f"MLX quantizes the base to 4 or 8 bits, not {bits}")
    if not any(_quantizable(path, module) for path, module in model.named_modules()):
        raise ValueError(f"no linear layer of this model has an input width divisible by {GROUP_SIZE}")
    nn.quantize(model, group_size=GROUP_SIZE, bits=bits, class_predicate=_quantizable)
    setattr(model, QUANTIZATION_ATTRIBUTE, Quantization(bits))
    mx.eval(model.parameters())
    return model


def model_quantization(model: Any) -> Optional[Quantization]:
    return getattr(model, QUANTIZATION_ATTRIBUTE, None)


def dense_layer(module: Any) -> Any:
    """The float layer a quantized linear, embedding or expert stack computes with."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    weight = mx.dequantize(module.weight, module.scales, module.biases, module.group_size, module.bits)
    if isinstance(module, QuantizedSwitchLinear):
        experts, out_features, in_features = weight.shape
        stack = SwitchLinear(in_features, out_features, experts, bias="bias" in module)
        stack.weight = weight
        if "bias" in module:
            stack.bias = module.bias
        return stack
    if isinstance(module, nn.QuantizedEmbedding):
        dense = nn.Embedding(*weight.shape)
        dense.weight = weight
        return dense
    out_features, in_features = weight.shape
    has_bias = "bias" in module
    dense = nn.Linear(in_features, out_features, bias=has_bias)
    dense.weight = weight
    if has_bias:
        dense.bias = module.bias
    return dense


def dequantized_copy(model: Any) -> Any:
    """A copy of `model` with every quantized layer (LoRA's base layers too) back in floating point.

    A model that was never quantized is returned as it is: there is nothing to undo and nothing to copy.
    """
    kinds = _quantized_kinds()
    if not any(isinstance(module, kinds) for _, module in model.named_modules()):
        return model
    duplicate = copy.deepcopy(model)
    replacements = [
        (path, dense_layer(module)) for path, module in duplicate.named_modules() if isinstance(module, kinds)
    ]
    duplicate.update_modules(tree_unflatten(replacements))
    setattr(duplicate, QUANTIZATION_ATTRIBUTE, None)
    mx.eval(duplicate.parameters())
    return duplicate
