# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`save_pretrained_gguf` and `push_to_hub_gguf` for an embedding model: the backbone (LoRA folded in) written by
the GGUF exporter's converter for its family, with the folder's pooling as llama.cpp's pooling key.

llama.cpp's embedding output is the pooled token states; it normalizes them itself when asked (llama-cpp-python's
`embed(normalize=True)`), so a Normalize module needs no tensor. Dense layers have no place in a `bert` file and
are refused, as are the families whose `Backbone.gguf_refusal` says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MethodType
from typing import Any, List

import mlx.core as mx
import numpy as np

from ..gguf.convert import family_for, gguf_tensors, write_gguf
from ..gguf.converters.bert import POOLING_KEY, POOLING_TYPES, wordpiece_keys
from ..gguf.file_types import UNIFORM_TYPES, file_label, llama_file_type, resolve_method
from ..models import hub
from .backbone import backbone_for, hub_names
from .saving import merged_backbone_weights


def _refuse(model: Any, methods: List[str]) -> None:
    model_type = model.config.model_type
    reason = backbone_for(model_type).gguf_refusal
    if reason:
        raise NotImplementedError(f"save_pretrained_gguf for a {model_type!r} embedding model on MLX: {reason}")
    if model.spec.dense:
        raise NotImplementedError("save_pretrained_gguf on MLX: llama.cpp's bert file has no place for Dense layers")
    if len(model.spec.pooling) != 1 or model.spec.pooling[0] not in POOLING_TYPES:
        raise NotImplementedError(
            f"save_pretrained_gguf on MLX: llama.cpp pools by {', '.join(POOLING_TYPES)}, "
            f"not {'+'.join(model.spec.pooling)}"
        )
    for method in methods:
        if method not in UNIFORM_TYPES:
            raise NotImplementedError(
                f"save_pretrained_gguf(quantization_method={method!r}) for an embedding model on MLX: "
                f"one of {', '.join(UNIFORM_TYPES)}"
            )


def save_pretrained_gguf(
    model: Any, save_directory: str, tokenizer: Any = None, quantization_method: Any = "fast_quantized", **kwargs: Any
) -> List[Path]:
    """`unsloth.<TYPE>.gguf` per method in `save_directory`, with the tokenizer and config they are built from."""
    if kwargs:
        raise NotImplementedError(f"save_pretrained_gguf for an embedding model does not support {sorted(kwargs)}")
    requested = quantization_method if isinstance(quantization_method, (list, tuple)) else [quantization_method]
    methods = [resolve_method(method) for method in requested]
    _refuse(model, methods)
    config = json.loads((model.source_folder() / "config.json").read_text(encoding="utf-8"))
    config[POOLING_KEY] = model.spec.pooling[0]
    family_for(config)  # the converter's own refusals, before anything is written
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    (tokenizer or model.tokenizer).save_pretrained(str(folder))
    weights = hub_names(model.config.model_type, merged_backbone_weights(model))
    tensors = gguf_tensors({name: np.array(value.astype(mx.float32)) for name, value in weights.items()}, config)
    keys = wordpiece_keys(folder, int(config["vocab_size"]))
    paths = []
    for method in dict.fromkeys(methods):
        path = folder / f"unsloth.{file_label(method)}.gguf"
        write_gguf(path, tensors, config, keys, UNIFORM_TYPES[method][0], llama_file_type(method))
        paths.append(path)
    return paths


def attach_gguf(model: Any) -> None:
    model.save_pretrained_gguf = MethodType(save_pretrained_gguf, model)
    model.push_to_hub_gguf = MethodType(hub.push_to_hub_gguf, model)
