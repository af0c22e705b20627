# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Export a trained MLX model to a GGUF file llama.cpp loads: LoRA folded into the base weights first.

`mlx_lm`'s converter writes the weights as float32 GGUF; `gguf_file_types` then re-encodes that file in the
requested llama.cpp type (q8_0, q4_0, f16, bf16, ...) with the `gguf` package that ships with llama.cpp.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.checkpoint import SOURCE_PATH_ATTRIBUTE

from .gguf_file_types import K_QUANT_MIXES, UNIFORM_TYPES, can_quantize, gguf_version, producible_methods, rewrite_gguf
from .gguf_vocab import byte_level_bpe_keys
from .names import normalised_name
from .quantize import dequantized_copy

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral")
# CUDA Unsloth's default for save_pretrained_gguf, and its other names for llama.cpp methods.
DEFAULT_QUANTIZATION_METHOD = "fast_quantized"
METHOD_ALIASES = {"fast_quantized": "q8_0", "quantized": "q4_k_m"}
# "not_quantized" keeps the model's own float type.
_OWN_DTYPE_METHODS = {mx.float32: "f32", mx.float16: "f16", mx.bfloat16: "bf16"}


def merged_weights(model: Any) -> Dict[str, mx.array]:
    """Every weight under its Hugging Face name, with each LoRA layer folded into its linear; the model is untouched."""
    weights = dict(tree_flatten(model.parameters()))
    for name, module in model.named_modules():
        if not hasattr(module, "fuse") or not hasattr(module, "lora_a"):
            continue
        prefix = f"{name}."
        for key in [key for key in weights if key.startswith(prefix)]:
            del weights[key]
        for key, value in tree_flatten(module.fuse(dequantize=True).parameters()):
            weights[prefix + key] = value
    quantized = sorted(key for key in weights if key.endswith(".scales"))
    if quantized:
        raise NotImplementedError(
            f"GGUF export of a quantized MLX model is not supported (quantized tensors: {quantized[:3]} ...)"
        )
    return weights


def model_config(model: Any) -> Dict[str, Any]:
    """The Hugging Face config.json the model was loaded from, else its mlx_lm arguments."""
    source = getattr(model, SOURCE_PATH_ATTRIBUTE, None)
    if source is not None and (Path(source) / "config.json").is_file():
        return json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
    args = getattr(model, "args", None)
    if args is not None and dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    raise ValueError("cannot tell the model's configuration: it was not loaded from a folder and has no mlx_lm args")


def available_methods() -> List[str]:
    """Every quantization_method this install can write, CUDA Unsloth's aliases included."""
    methods = producible_methods()
    aliases = [alias for alias, method in METHOD_ALIASES.items() if method in methods]
    return ["not_quantized", *aliases, *methods]


def resolve_method(quantization_method: Any, model_dtype: Any) -> str:
    """The llama.cpp method name a `quantization_method` stands for, or an error naming the ones that work here."""
    method = "q8_0" if quantization_method is None else normalised_name(quantization_method)
    method = METHOD_ALIASES.get(method, method)
    if method == "not_quantized":
        method = _OWN_DTYPE_METHODS.get(model_dtype, "f32")
    if method in UNIFORM_TYPES and can_quantize(UNIFORM_TYPES[method]):
        return method
    if method in K_QUANT_MIXES:
        reason = f"the gguf package ({gguf_version()}) has no {K_QUANT_MIXES[method]} quantizer"
    elif method in UNIFORM_TYPES:
        reason = f"the gguf package ({gguf_version()}) cannot quantize {UNIFORM_TYPES[method]}"
    else:
        reason = "it is not a llama.cpp quantization method"
    raise NotImplementedError(
        f"quantization_method={quantization_method!r} cannot be written on MLX: {reason}; "
        f"available: {', '.join(available_methods())}"
    )


def _gguf_package_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("gguf") is None


def save_pretrained_gguf(
    model: Any,
    save_directory: str | Path,
    tokenizer: Any,
    quantization_method: Any = DEFAULT_QUANTIZATION_METHOD,
) -> Any:
    """Write `unsloth.<TYPE>.gguf` (and the tokenizer and config it is built from) into `save_directory`.

    A list of methods writes one file each and returns their paths, as CUDA Unsloth accepts.
    """
    if isinstance(quantization_method, (list, tuple)):
        return [save_pretrained_gguf(model, save_directory, tokenizer, method) for method in quantization_method]
    if _gguf_package_missing():
        raise ImportError("GGUF export on MLX needs the gguf package that ships with llama.cpp: pip install gguf")
    resolve_method(quantization_method, mx.float32)  # a name that cannot be written fails before the copy
    model = dequantized_copy(model)
    config = model_config(model)
    if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise NotImplementedError(
            f"mlx_lm's GGUF converter supports {supported} models, not {config.get('model_type')!r}"
        )
    weights = merged_weights(model)
    method = resolve_method(quantization_method, weights["model.embed_tokens.weight"].dtype)
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    # The converter reads the vocabulary back from tokenizer files in the same folder.
    tokenizer.save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    from mlx_lm.gguf import convert_to_gguf

    path = folder / f"unsloth.{UNIFORM_TYPES[method].upper()}.gguf"
    converted = folder / f".{path.name}.converter.gguf"
    try:
        # Quantizing from float32 loses the least; the converter would otherwise keep each weight's own type.
        as_float32 = {name: value.astype(mx.float32) for name, value in weights.items()}
        convert_to_gguf(folder, as_float32, config, str(converted))
        vocabulary = byte_level_bpe_keys(folder, int(weights["model.embed_tokens.weight"].shape[0]))
        rewrite_gguf(converted, path, UNIFORM_TYPES[method], vocabulary)
    finally:
        converted.unlink(missing_ok=True)
    return path
