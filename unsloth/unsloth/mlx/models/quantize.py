# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`load_in_4bit` / `load_in_8bit` / `load_in_fp8` on MLX: the base quantized with `mlx.nn.quantize` (affine 4 or 8
bits; `mxfp8` for fp8, as upstream's own MLX loader maps it), and its undoing.

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

from unsloth_zoo.mlx.qat import QatScheme, convert_qat, qat_scheme

GROUP_SIZE = 64
AFFINE = "affine"
QUANTIZATION_ATTRIBUTE = "unsloth_quantization"
# The LoRA settings and adapter weights a QAT model had before torchao's convert step folded them in.
CONVERTED_ADAPTER_ATTRIBUTE = "unsloth_converted_adapter"


@dataclass(frozen=True)
class Quantization:
    """How the base was quantized; a plain object, so mlx never counts it among the model's parameters."""

    bits: int
    group_size: int = GROUP_SIZE
    mode: str = AFFINE

    def as_dict(self) -> Dict[str, Any]:
        """mlx_lm's `quantization` config entry; the mode is named only when it is not mlx_lm's default."""
        values = asdict(self)
        if self.mode == AFFINE:
            del values["mode"]
        return values

    @property
    def load_flag(self) -> str:
        """The `from_pretrained` keyword that asks for this quantization."""
        return "load_in_fp8" if self.mode == FP8.mode else f"load_in_{self.bits}bit"


# MX FP8 (E4M3 values, one power-of-two scale per 32): upstream's MLX loader's format for load_in_fp8.
FP8 = Quantization(8, 32, "mxfp8")


def requested_quantization(load_in_4bit: Any, load_in_8bit: Any, load_in_fp8: Any = False) -> Optional[Quantization]:
    """The quantization a load asks for, or None; asking for two is an error rather than a silent choice."""
    asked = [name for name, value in (("4bit", load_in_4bit), ("8bit", load_in_8bit), ("fp8", load_in_fp8)) if value]
    if len(asked) > 1:
        raise ValueError(f"{' and '.join(f'load_in_{name}=True' for name in asked)} were given together; choose one")
    if load_in_4bit:
        return Quantization(4)
    if load_in_8bit:
        return Quantization(8)
    return FP8 if load_in_fp8 else None


def as_quantization(value: "Quantization | int | Dict[str, Any]") -> Quantization:
    """Bits, a saved `quantization` entry or a Quantization, as a Quantization."""
    if isinstance(value, Quantization):
        return value
    if isinstance(value, dict):
        return Quantization(int(value["bits"]), int(value.get("group_size", GROUP_SIZE)), value.get("mode", AFFINE))
    return Quantization(int(value))


def _quantizable_in_groups(group_size: int) -> Any:
    def quantizable(path: str, module: Any) -> bool:
        weight = getattr(module, "weight", None)
        return hasattr(module, "to_quantized") and weight is not None and weight.shape[-1] % group_size == 0

    return quantizable


def _quantized_kinds() -> tuple:
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    return (nn.QuantizedLinear, nn.QuantizedEmbedding, QuantizedSwitchLinear)


def quantize_model(model: Any, quantization: "Quantization | int") -> Any:
    """Quantize `model` in place (4 or 8 bits affine with group size 64, or a Quantization such as FP8); returns it."""
    chosen = as_quantization(quantization)
    if chosen.bits not in (4, 8):
        raise ValueError(f"MLX quantizes the base to 4 or 8 bits, not {chosen.bits}")
    quantizable = _quantizable_in_groups(chosen.group_size)
    if not any(quantizable(path, module) for path, module in model.named_modules()):
        raise ValueError(f"no linear layer of this model has an input width divisible by {chosen.group_size}")
    nn.quantize(model, group_size=chosen.group_size, bits=chosen.bits, mode=chosen.mode, class_predicate=quantizable)
    setattr(model, QUANTIZATION_ATTRIBUTE, chosen)
    mx.eval(model.parameters())
    return model


def model_quantization(model: Any) -> Optional[Quantization]:
    return getattr(model, QUANTIZATION_ATTRIBUTE, None)


def dense_layer(module: Any) -> Any:
    """The float layer a quantized linear, embedding or expert stack computes with."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    weight = mx.dequantize(
        module.weight,
        module.scales,
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=getattr(module, "mode", AFFINE),
    )
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


# ---- qat_scheme: the MLX quantization a scheme trains against, or why it cannot ------------------------------

# torchao's Int4WeightOnlyConfig(group_size=128), CUDA Unsloth's "int4", is affine 4-bit in groups of 128, as MLX's is.
_INT4 = QatScheme("int4", bits=4, group_size=128)
# CUDA Unsloth's "int8-int4" (ExecuTorch's scheme): torchao's Int8DynamicActivationIntxWeightConfig with int4 weights,
# symmetric in groups of 32, each token's activations int8 asymmetric at run time, and the embedding int8 per row.
_INT8_INT4 = QatScheme("int8-int4", bits=4, group_size=32, symmetric=True, activation_bits=8, embedding_bits=8)
# CUDA Unsloth's "int8": torchao's IntxWeightOnlyConfig(int8, PerAxis(0)), symmetric with one scale per row.
_INT8 = QatScheme("int8", bits=8, group_size=32, symmetric=True, per_row=True)
# "phone-deployment" is CUDA Unsloth's other name for int8-int4.
QAT_SCHEMES = {"int4": _INT4, "int8-int4": _INT8_INT4, "phone-deployment": _INT8_INT4, "int8": _INT8}
_FP8_ACTIVATIONS = (
    "it rounds to fp8 e4m3 with one float scale per row ({}); MLX's only fp8 format, mxfp8, has one power-of-two "
    "scale per 32 values, so the saved MLX model would not compute what trained; use qat_scheme='int4' or 'int8-int4'"
)
QAT_REFUSED = {
    "fp8-int4": _FP8_ACTIVATIONS.format("fp8 activations, int4 weights"),
    "fp8-fp8": _FP8_ACTIVATIONS.format("fp8 activations and weights"),
    "cactus": "it quantizes int8 symmetrically for the Cactus runtime, which reads no MLX files",
}


def qat_scheme_named(value: Any, model_type: str = "") -> QatScheme:
    """The scheme a notebook's `qat_scheme` names; a scheme MLX cannot train faithfully is refused with the reason."""
    if value in QAT_SCHEMES:
        scheme = QAT_SCHEMES[value]
        if scheme.embedding_bits and "gemma3" in model_type:
            # CUDA Unsloth's own switch: Gemma 3's 262k-row vocabulary trains unstably with int8 embeddings.
            print("Unsloth: Gemma3 has a large vocabulary causing int8 embedding issues. Switching to int4 QAT.")
            return _INT4
        return scheme
    if value in QAT_REFUSED:
        raise NotImplementedError(f"qat_scheme={value!r} on MLX: {QAT_REFUSED[value]}")
    raise ValueError(f"qat_scheme={value!r} is not one of {', '.join([*QAT_SCHEMES, *QAT_REFUSED])}")


def convert_qat_model(model: Any) -> Any:
    """torchao's convert step: the adapters folded in and the covered linears quantized as they trained; the model is
    then a quantized model without LoRA, which `save_pretrained` writes whole."""
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx.lora import SETTINGS_ATTRIBUTE, lora_settings

    scheme = qat_scheme(model)
    if scheme is None:
        raise ValueError(
            "QATConfig(step='convert') on a model trained without qat_scheme: pass qat_scheme to get_peft_model first"
        )
    settings = lora_settings(model)
    if settings is not None:
        # CUDA's peft keeps the adapter beside the converted base, so the notebook's save_pretrained still writes it.
        adapter = dict(tree_flatten(model.trainable_parameters()))
        setattr(model, CONVERTED_ADAPTER_ATTRIBUTE, (settings, adapter))
    convert_qat(model)
    setattr(model, SETTINGS_ATTRIBUTE, None)
    setattr(model, QUANTIZATION_ATTRIBUTE, Quantization(scheme.bits, scheme.group_size, scheme.mode))
    return model
