# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Quantization-aware training in MLX's own quantization: each covered linear computes with its weight quantized and
dequantized, the gradient passing straight through the rounding.

Under LoRA the weight fake-quantized is the base with the adapter folded in, so the merged and quantized model that
`convert_qat` makes computes exactly what trained. A linear is covered when its input width is a multiple of the
scheme's group size (torchao's int4 scheme likewise skips narrower ones). A scheme may also quantize each token's
activations at run time (torchao's int8 dynamic activations), and the embedding; torchao's symmetric grids are
stored exactly in MLX's affine format (a symmetric code `q` is the affine code `q + 2**(bits-1)` with bias
`-2**(bits-1) * scale`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

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
    # torchao's symmetric weight grid (scale = max|w| / ((2**bits - 1) / 2)) instead of MLX's min-max affine one.
    symmetric: bool = False
    # One symmetric scale per weight row (torchao's PerAxis(0)); MLX stores it repeated over `group_size` groups.
    per_row: bool = False
    # Each token's activations quantized (asymmetric, dynamic) to this many bits before every covered linear.
    activation_bits: Optional[int] = None
    # The embedding's rows quantized symmetrically, one scale per row, to this many bits.
    embedding_bits: Optional[int] = None

    def quantization(self) -> Dict[str, Any]:
        """The scheme's weights as mlx_lm's `quantization` config entry."""
        values: Dict[str, Any] = {"group_size": self.group_size, "bits": self.bits}
        if self.mode != "affine":
            values["mode"] = self.mode
        return values


# torchao's floor on a scale (float32's machine epsilon), so an all-zero group or token divides by something.
_EPSILON = float(mx.finfo(mx.float32).eps)


def symmetric_codes(weight: mx.array, bits: int, group_size: int) -> Tuple[mx.array, mx.array]:
    """torchao's symmetric quantization in groups along the last axis: the signed codes and one scale per group,
    the scale already in the weight's dtype so that MLX's stored scale is the one trained against."""
    grouped = weight.astype(mx.float32).reshape(*weight.shape[:-1], -1, group_size)
    half_range = (2**bits - 1) / 2
    scales = mx.maximum(mx.abs(grouped).max(axis=-1, keepdims=True) / half_range, _EPSILON)
    scales = scales.astype(weight.dtype).astype(mx.float32)
    codes = mx.clip(mx.round(grouped / scales), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return codes, scales


def _symmetric_values(weight: mx.array, bits: int, group_size: int) -> mx.array:
    codes, scales = symmetric_codes(weight, bits, group_size)
    return (codes * scales).reshape(weight.shape).astype(weight.dtype)


def _affine_values(weight: mx.array, scheme: "QatScheme") -> mx.array:
    packed = mx.quantize(weight, group_size=scheme.group_size, bits=scheme.bits, mode=scheme.mode)
    scales, biases = packed[1], packed[2] if len(packed) > 2 else None
    values = mx.dequantize(packed[0], scales, biases, group_size=scheme.group_size, bits=scheme.bits, mode=scheme.mode)
    return values.astype(weight.dtype)


def per_token_values(x: mx.array, bits: int) -> mx.array:
    """Each token's activations quantized and dequantized as torchao's dynamic asymmetric per-token int8 does: the
    token's range widened to hold zero, a zero point that maps zero exactly, codes clipped to the signed range."""
    values = x.astype(mx.float32)
    low = mx.minimum(values.min(axis=-1, keepdims=True), 0.0)
    high = mx.maximum(values.max(axis=-1, keepdims=True), 0.0)
    lowest, highest = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    scale = mx.maximum((high - low) / (highest - lowest), _EPSILON)
    zero = mx.clip(lowest - mx.round(low / scale), lowest, highest)
    codes = mx.clip(mx.round(values / scale) + zero, lowest, highest)
    return ((codes - zero) * scale).astype(x.dtype)


def _straight_through(values_of: Callable[[mx.array], mx.array]) -> Callable[[mx.array], mx.array]:
    """`values_of` whose gradient is the identity (the straight-through estimator)."""

    @mx.custom_function
    def fake_quantize(x: mx.array) -> mx.array:
        return values_of(x)

    @fake_quantize.vjp
    def straight_through(primals: Any, cotangent: mx.array, output: Any) -> mx.array:
        return cotangent

    return fake_quantize


@functools.cache
def fake_quantizer(scheme: "QatScheme") -> Callable[[mx.array], mx.array]:
    """`weight -> dequantize(quantize(weight))` in the scheme's grid, with a straight-through gradient."""
    if scheme.per_row:
        return _straight_through(lambda weight: _symmetric_values(weight, scheme.bits, weight.shape[-1]))
    if scheme.symmetric:
        return _straight_through(lambda weight: _symmetric_values(weight, scheme.bits, scheme.group_size))
    return _straight_through(lambda weight: _affine_values(weight, scheme))


@functools.cache
def activation_quantizer(bits: int) -> Callable[[mx.array], mx.array]:
    """Per-token dynamic activation fake quantization with a straight-through gradient."""
    return _straight_through(lambda x: per_token_values(x, bits))


@functools.cache
def embedding_quantizer(bits: int) -> Callable[[mx.array], mx.array]:
    """Each embedding row quantized symmetrically with one scale, with a straight-through gradient."""
    return _straight_through(lambda weight: _symmetric_values(weight, bits, weight.shape[-1]))


def _quantized_input(x: mx.array, scheme: "QatScheme") -> mx.array:
    return x if scheme.activation_bits is None else activation_quantizer(scheme.activation_bits)(x)


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
        x = _quantized_input(x, self._scheme)
        return mx.addmm(self.bias, x, weight.T) if "bias" in self else x @ weight.T


class FakeQuantizedEmbedding(nn.Embedding):
    """An embedding (and the tied output head that reads it) computing with its rows fake-quantized."""

    def __init__(self, num_embeddings: int, dims: int, bits: int) -> None:
        super().__init__(num_embeddings, dims)
        self._bits = bits

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding, bits: int) -> "FakeQuantizedEmbedding":
        rows, dims = embedding.weight.shape
        layer = cls(rows, dims, bits)
        layer.update(embedding.parameters())
        if not embedding.trainable_parameters():
            layer.freeze()
        return layer

    def quantized_weight(self) -> mx.array:
        return embedding_quantizer(self._bits)(self.weight)

    def __call__(self, x: mx.array) -> mx.array:
        return self.quantized_weight()[x]

    def as_linear(self, x: mx.array) -> mx.array:
        return x @ self.quantized_weight().T


class ActivationQuantizedLinear(nn.QuantizedLinear):
    """MLX's quantized linear fed each token's activations quantized as the scheme trained them (MLX multiplies
    float activations, so they are quantized and dequantized in front of its kernel)."""

    activation_bits = 8

    @classmethod
    def from_quantized(cls, linear: nn.QuantizedLinear, activation_bits: int) -> "ActivationQuantizedLinear":
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.group_size, layer.bits, layer.mode = linear.group_size, linear.bits, getattr(linear, "mode", "affine")
        for name, value in linear.parameters().items():
            setattr(layer, name, value)
        layer.activation_bits = activation_bits
        layer.freeze()
        return layer

    def __call__(self, x: mx.array) -> mx.array:
        return super().__call__(per_token_values(x, self.activation_bits))


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
            y = _quantized_input(x, self._scheme) @ weight.T
            if "bias" in self.linear:
                y = y + self.linear.bias
            # Dropout on the adapter's input only: the folded weight saw `x`, so the adapter gets the difference.
            if self.dropout.training and self.dropout._p_1 < 1:
                y = y + (self.scale * ((self.dropout(x) - x) @ self.lora_a) @ self.lora_b).astype(x.dtype)
            return y

    return FakeQuantizedLoRALinear


# MLX's affine group sizes, widest first: a row quantized with one scale is stored in the widest that divides it.
_MLX_GROUP_SIZES = (128, 64, 32)


def _row_group_size(width: int) -> Optional[int]:
    return next((size for size in _MLX_GROUP_SIZES if width % size == 0), None)


def _covered(module: Any, scheme: QatScheme) -> bool:
    weight = getattr(module, "weight", None)
    return weight is not None and weight.ndim == 2 and weight.shape[-1] % scheme.group_size == 0


def _stored_group_size(width: int, scheme: QatScheme) -> int:
    return (_row_group_size(width) or scheme.group_size) if scheme.per_row else scheme.group_size


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
        elif scheme.embedding_bits and type(module) is nn.Embedding and _row_group_size(module.weight.shape[-1]):
            replacements.append((path, FakeQuantizedEmbedding.from_embedding(module, scheme.embedding_bits)))
    if not replacements:
        raise ValueError(
            f"qat_scheme={scheme.name!r}: no linear of this model has an input width divisible by {scheme.group_size}"
        )
    model.update_modules(tree_unflatten(replacements))
    setattr(model, QAT_ATTRIBUTE, scheme)
    return len(replacements)


def qat_scheme(model: Any) -> Optional[QatScheme]:
    return getattr(model, QAT_ATTRIBUTE, None)


def _packed_symmetric(codes: mx.array, scales: mx.array, bits: int, group_size: int, dtype: Any) -> Tuple:
    """Signed codes with their scales (groups of any multiple of `group_size`) as MLX's affine weight, scales and
    biases in groups of `group_size`: the code shifted by `2**(bits-1)`, the bias that shift times the scale."""
    rows = codes.shape[0]
    offset = 2 ** (bits - 1)
    unsigned = (codes.reshape(rows, -1) + offset).astype(mx.uint32)
    per_word = 32 // bits
    shifts = mx.arange(per_word, dtype=mx.uint32) * bits
    weight = (unsigned.reshape(rows, -1, per_word) << shifts).sum(axis=-1).astype(mx.uint32)
    stored = mx.repeat(scales.reshape(rows, -1), codes.shape[-1] // group_size, axis=-1).astype(dtype)
    return weight, stored, (-offset * stored).astype(dtype)


def _quantized_linear(plain: nn.Linear, scheme: QatScheme) -> nn.Module:
    """The MLX layer a fake-quantized linear computed as."""
    width = plain.weight.shape[-1]
    stored = _stored_group_size(width, scheme)
    layer = nn.QuantizedLinear.from_linear(plain, stored, scheme.bits, mode=scheme.mode)
    if scheme.symmetric:
        codes, scales = symmetric_codes(plain.weight, scheme.bits, width if scheme.per_row else scheme.group_size)
        layer.weight, layer.scales, layer.biases = _packed_symmetric(
            codes, scales, scheme.bits, stored, plain.weight.dtype
        )
    if scheme.activation_bits is not None:
        layer = ActivationQuantizedLinear.from_quantized(layer, scheme.activation_bits)
    return layer


def _quantized_embedding(embedding: FakeQuantizedEmbedding) -> nn.QuantizedEmbedding:
    """The MLX quantized embedding holding the rows the fake-quantized one computed with, one scale per row."""
    weight = embedding.weight
    group_size = _row_group_size(weight.shape[-1])
    if group_size is None:  # prepare_qat fake-quantizes only embeddings whose width an MLX group divides
        raise ValueError(f"an embedding {weight.shape[-1]} wide has no MLX quantization group that divides it")
    layer = nn.QuantizedEmbedding.from_embedding(nn.Embedding(*weight.shape), group_size, embedding._bits)
    codes, scales = symmetric_codes(weight, embedding._bits, weight.shape[-1])
    layer.weight, layer.scales, layer.biases = _packed_symmetric(
        codes, scales, embedding._bits, group_size, weight.dtype
    )
    return layer


def convert_qat(model: Any) -> Any:
    """torchao's `convert` step in MLX's format: each fake-quantized linear (its adapter folded in) becomes the
    `nn.QuantizedLinear` it computed as (one that quantizes its activations too, where the scheme does), each
    fake-quantized embedding the `nn.QuantizedEmbedding`; the model no longer trains and answers as it did at the
    last step."""
    scheme = qat_scheme(model)
    if scheme is None:
        raise ValueError("this model was not prepared for quantization-aware training (get_peft_model(qat_scheme=))")
    replacements = []
    for path, module in model.named_modules():
        if isinstance(module, FakeQuantizedEmbedding):
            replacements.append((path, _quantized_embedding(module)))
            continue
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
        replacements.append((path, _quantized_linear(plain, scheme)))
    model.update_modules(tree_unflatten(replacements))
    model.freeze()
    setattr(model, QAT_ATTRIBUTE, None)
    mx.eval(model.parameters())
    return model


# The saved config's record of activation quantization, which mlx_lm's loader does not apply and ours restores.
ACTIVATION_CONFIG_KEY = "unsloth_activation_quantization"


def saved_quantization_config(model: Any, quantization: Dict[str, Any]) -> Dict[str, Any]:
    """The config entries for a converted model: mlx_lm's `quantization` (with a per-layer entry for each layer
    quantized otherwise, such as int8 embedding rows) and the activation quantization its linears apply."""
    entries = dict(quantization)
    activation_bits = None
    for path, module in model.named_modules():
        if isinstance(module, ActivationQuantizedLinear):
            activation_bits = module.activation_bits
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)) and (
            module.bits,
            module.group_size,
        ) != (quantization["bits"], quantization["group_size"]):
            entries[path] = {"group_size": module.group_size, "bits": module.bits}
    config: Dict[str, Any] = {"quantization": entries}
    if activation_bits is not None:
        config[ACTIVATION_CONFIG_KEY] = {"bits": activation_bits, "granularity": "per_token", "symmetric": False}
    return config


def restore_activation_quantization(model: Any, config: Dict[str, Any]) -> int:
    """Make every quantized linear of a loaded model quantize its activations as its saved config records;
    returns how many do (0 for a config without that record)."""
    entry = config.get(ACTIVATION_CONFIG_KEY)
    if not entry:
        return 0
    replacements = [
        (path, ActivationQuantizedLinear.from_quantized(module, int(entry["bits"])))
        for path, module in model.named_modules()
        if type(module) is nn.QuantizedLinear
    ]
    model.update_modules(tree_unflatten(replacements))
    return len(replacements)
