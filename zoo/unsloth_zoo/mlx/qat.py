# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Quantization-aware training in MLX's own quantization: each covered linear computes with its weight quantized and
dequantized (`mx.quantize` / `mx.dequantize`), the gradient passing straight through the rounding.

Under LoRA the weight fake-quantized is the base with the adapter folded in, so the merged and quantized model that
`convert_qat` makes computes exactly what trained. A linear is covered when its input width is a multiple of the
scheme's group size (torchao's int4 scheme likewise skips narrower ones).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Optional

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

QAT_ATTRIBUTE = "unsloth_qat_scheme"


@dataclass(frozen=True)
class QatScheme:
    """A weight quantization MLX computes with: its bits, group size and mode (`mx.quantize`'s arguments)."""

    name: str
    bits: int
    group_size: int
    mode: str = "affine"

    def quantization(self) -> Dict[str, Any]:
        """The scheme as mlx_lm's `quantization` config entry."""
        values = {key: value for key, value in asdict(self).items() if key != "name"}
        if self.mode == "affine":
            del values["mode"]
        return values


_FAKE_QUANTIZERS: Dict[QatScheme, Callable[[mx.array], mx.array]] = {}


def fake_quantizer(scheme: QatScheme) -> Callable[[mx.array], mx.array]:
    """`weight -> dequantize(quantize(weight))` whose gradient is the identity (the straight-through estimator)."""
    if scheme in _FAKE_QUANTIZERS:
        return _FAKE_QUANTIZERS[scheme]

    @mx.custom_function
    def fake_quantize(weight: mx.array) -> mx.array:
        packed = mx.quantize(weight, group_size=scheme.group_size, bits=scheme.bits, mode=scheme.mode)
        scales, biases = packed[1], packed[2] if len(packed) > 2 else None
        values = mx.dequantize(
            packed[0], scales, biases, group_size=scheme.group_size, bits=scheme.bits, mode=scheme.mode
        )
        return values.astype(weight.dtype)

    @fake_quantize.vjp
    def straight_through(primals: Any, cotangent: mx.array, output: Any) -> mx.array:
        return cotangent

    _FAKE_QUANTIZERS[scheme] = fake_quantize
    return fake_quantize


class FakeQuantizedLinear(nn.Linear):
    """A linear computing with its weight fake-quantized by `scheme`."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool, scheme: QatScheme) -> None:
        super().__init__(input_dims, output_dims, bias=bias)
        self._scheme = scheme

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: QatScheme) -> "FakeQuantizedLinear":
        output_dims, input_dims = linear.weight.shape
        layer = cls(input_dims, output_dims, "bias" in linear, scheme)
        layer.update(linear.parameters())
        if not linear.trainable_parameters():
            layer.freeze()
        return layer

    def __call__(self, x: mx.array) -> mx.array:
        weight = fake_quantizer(self._scheme)(self.weight)
        return mx.addmm(self.bias, x, weight.T) if "bias" in self else x @ weight.T


@functools.cache
def fake_quantized_lora_class() -> Any:
    """The LoRA layer QAT trains, built on first use: mlx_lm imports transformers (and torch, where installed)."""
    from mlx_lm.tuner.lora import LoRALinear

    class FakeQuantizedLoRALinear(LoRALinear):
        """LoRA whose base, with the adapter folded in, is fake-quantized; dropout still reaches the adapter alone."""

        @classmethod
        def from_lora(cls, lora: LoRALinear, scheme: QatScheme) -> "LoRALinear":
            layer = cls.__new__(cls)
            nn.Module.__init__(layer)
            layer.linear, layer.dropout = lora.linear, lora.dropout
            layer.lora_a, layer.lora_b, layer.scale = lora.lora_a, lora.lora_b, lora.scale
            layer._scheme = scheme
            layer.linear.freeze()
            return layer

        def folded_weight(self) -> mx.array:
            delta = (self.scale * self.lora_b.T) @ self.lora_a.T
            return self.linear.weight + delta.astype(self.linear.weight.dtype)

        def __call__(self, x: mx.array) -> mx.array:
            weight = fake_quantizer(self._scheme)(self.folded_weight())
            y = x @ weight.T
            if "bias" in self.linear:
                y = y + self.linear.bias
            # Dropout on the adapter's input only: the folded weight saw `x`, so the adapter gets the difference.
            if self.dropout.training and self.dropout._p_1 < 1:
                y = y + (self.scale * ((self.dropout(x) - x) @ self.lora_a) @ self.lora_b).astype(x.dtype)
            return y

    return FakeQuantizedLoRALinear


def _covered(module: Any, scheme: QatScheme) -> bool:
    weight = getattr(module, "weight", None)
    return weight is not None and weight.ndim == 2 and weight.shape[-1] % scheme.group_size == 0


def prepare_qat(model: Any, scheme: QatScheme) -> int:
    """Make every covered linear of `model` (LoRA layers and plain linears alike) compute fake-quantized; returns how
    many were. The model keeps its float weights, so saving an adapter or a float merge is unchanged."""
    fake_lora = fake_quantized_lora_class()
    lora_type = fake_lora.__mro__[1]
    modules = model.named_modules()
    # A LoRA layer's own base is replaced with the LoRA layer, not on its own.
    lora_bases = {id(module.linear) for _, module in modules if isinstance(module, lora_type)}
    replacements = []
    for path, module in modules:
        if isinstance(module, fake_lora) or id(module) in lora_bases:
            continue
        if isinstance(module, lora_type) and type(module.linear) is nn.Linear and _covered(module.linear, scheme):
            replacements.append((path, fake_lora.from_lora(module, scheme)))
        elif type(module) is nn.Linear and _covered(module, scheme):
            replacements.append((path, FakeQuantizedLinear.from_linear(module, scheme)))
    if not replacements:
        raise ValueError(
            f"qat_scheme={scheme.name!r}: no linear of this model has an input width divisible by {scheme.group_size}"
        )
    model.update_modules(tree_unflatten(replacements))
    setattr(model, QAT_ATTRIBUTE, scheme)
    return len(replacements)


def qat_scheme(model: Any) -> Optional[QatScheme]:
    return getattr(model, QAT_ATTRIBUTE, None)


def convert_qat(model: Any) -> Any:
    """torchao's `convert` step in MLX's format: each fake-quantized linear (its adapter folded in) becomes the
    `nn.QuantizedLinear` it computed as; the model no longer trains and answers as it did at the last step."""
    scheme = qat_scheme(model)
    if scheme is None:
        raise ValueError("this model was not prepared for quantization-aware training (get_peft_model(qat_scheme=))")
    replacements = []
    for path, module in model.named_modules():
        if isinstance(module, fake_quantized_lora_class()):
            plain = nn.Linear(
                module.linear.weight.shape[1], module.linear.weight.shape[0], bias="bias" in module.linear
            )
            plain.weight = module.folded_weight()
            if "bias" in module.linear:
                plain.bias = module.linear.bias
        elif isinstance(module, FakeQuantizedLinear):
            plain = nn.Linear(module.weight.shape[1], module.weight.shape[0], bias="bias" in module)
            plain.update(module.parameters())
        else:
            continue
        quantized = nn.QuantizedLinear.from_linear(plain, scheme.group_size, scheme.bits, mode=scheme.mode)
        replacements.append((path, quantized))
    model.update_modules(tree_unflatten(replacements))
    model.freeze()
    setattr(model, QAT_ATTRIBUTE, None)
    mx.eval(model.parameters())
    return model
