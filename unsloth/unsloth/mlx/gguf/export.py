# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""GGUF files llama.cpp loads, from a model's Hugging Face config and float weights (LoRA already folded in).

`models.gguf_save` hands over what a loaded MLX model holds; this layer knows only configs, tensors and files.
The weights are converted once (`gguf_convert`, with the tokenizer's keys from `gguf_tokenizer`) and written in
each requested type: the uniform types by the `gguf` package, the K-quant mixes by `kquants` in numpy, tensor for
tensor as llama.cpp's quantizer writes them from a float32 file (`gguf_file_types`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx
import numpy as np

from .convert import embedding_weight, family_for, gguf_tensors, with_common_keys, with_weight_settings, write_gguf
from .families import unwrap_text_model
from .file_types import (
    UNIFORM_TYPES,
    available_methods,
    file_label,
    llama_file_type,
    resolve_method,
)
from .kquants.writer import EncodedOnce, mix_types, write_mix
from .ollama import FILE_LOCATION, MODELFILE_NAME, build_modelfile
from .tokenizer import tokenizer_keys

# CUDA Unsloth's default for save_pretrained_gguf (q8_0).
DEFAULT_QUANTIZATION_METHOD = "fast_quantized"
# "not_quantized" keeps the model's own float type.
_OWN_DTYPE_METHODS = {mx.float32: "f32", mx.float16: "f16", mx.bfloat16: "bf16"}
__all__ = ["DEFAULT_QUANTIZATION_METHOD", "available_methods", "check_request", "write_files"]


def _gguf_package_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("gguf") is None


def _as_float32(weights: Dict[str, mx.array]) -> Dict[str, np.ndarray]:
    return {name: np.array(value.astype(mx.float32)) for name, value in weights.items()}


def requested_methods(quantization_method: Any) -> List[Any]:
    """The methods one call asks for: a list converts once and writes one file each, as CUDA Unsloth accepts."""
    requested = list(quantization_method) if isinstance(quantization_method, (list, tuple)) else [quantization_method]
    if not requested:
        raise ValueError(f"quantization_method is an empty list; choose from: {', '.join(available_methods())}")
    return requested


def check_request(config: Dict[str, Any], save_directory: str | Path, requested: List[Any]) -> None:
    """Everything that can refuse the export, checked before the weights are copied: the package, each method's
    name, the architecture, and a folder that cannot hold the files."""
    if _gguf_package_missing():
        raise ImportError("GGUF export on MLX needs the gguf package that ships with llama.cpp: pip install gguf")
    for method in requested:
        resolve_method(method)
    family_for(unwrap_text_model(config)[0])
    _check_writable(Path(save_directory))


def write_files(
    source: Dict[str, Any],
    weights: Dict[str, mx.array],
    save_directory: str | Path,
    tokenizer: Any,
    requested: List[Any],
    modelfile_location: str = "",
) -> List[Path]:
    """Write `unsloth.<TYPE>.gguf` for each requested method (and the tokenizer and config they are built from)
    into `save_directory`; the paths in the order asked. The Modelfile names the first file, or `modelfile_location`."""
    config, weights = unwrap_text_model(source, weights)
    config = with_common_keys(config)
    embeddings = weights[embedding_weight(config)]
    own_float = _OWN_DTYPE_METHODS.get(embeddings.dtype, "f32")
    methods = list(dict.fromkeys(resolve_method(method, own_float) for method in requested))
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    # Quantizing from float32 loses the least, whatever the model's own type.
    floats = _as_float32(weights)
    config = with_weight_settings(config, floats)
    tensors = gguf_tensors(floats, config)
    keys = tokenizer_keys(folder, int(embeddings.shape[0]))
    shared = EncodedOnce(mix_types(method, tensors, config) for method in methods if method not in UNIFORM_TYPES)
    paths = []
    for method in methods:
        path = folder / f"unsloth.{file_label(method)}.gguf"
        try:
            if method in UNIFORM_TYPES:
                write_gguf(path, tensors, config, keys, UNIFORM_TYPES[method][0], llama_file_type(method))
            else:
                write_mix(path, tensors, config, keys, method, shared=shared)  # as llama.cpp's quantizer writes it
        except BaseException:
            path.unlink(missing_ok=True)  # no half-written file
            raise
        paths.append(path)
    by_method = dict(zip(methods, paths))
    chosen = [by_method[resolve_method(method, own_float)] for method in requested]
    _write_modelfile(folder, modelfile_location or chosen[0].name, tokenizer, str(config.get("model_type", "this")))
    return chosen


def _check_writable(folder: Path) -> None:
    """Create `folder` if need be and write a scratch file there, so an unusable one is named before any work."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise type(error)(f"save_directory={str(folder)!r} cannot be written: {reason}") from error


def _write_modelfile(folder: Path, gguf_name: str, tokenizer: Any, model_type: str) -> None:
    """Ollama's Modelfile beside the first file asked for, kept on the tokenizer too, as CUDA Unsloth does."""
    text = build_modelfile(gguf_name, tokenizer, model_type)
    (folder / MODELFILE_NAME).write_text(text, encoding="utf-8")
    if FILE_LOCATION in str(getattr(tokenizer, "_ollama_modelfile", "")):
        return  # the prompt's Modelfile stays on the tokenizer for the next save, as CUDA Unsloth keeps it
    try:
        tokenizer._ollama_modelfile = text
    except AttributeError:  # a tokenizer that takes no new attributes still gets the file
        pass
