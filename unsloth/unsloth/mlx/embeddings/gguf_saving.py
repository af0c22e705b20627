# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`save_pretrained_gguf` and `push_to_hub_gguf` for an embedding model: the backbone (LoRA folded in) and its
Dense layers written by the family's embedding converter (`gguf/converters/embeddings.py`), with the folder's pooling
as llama.cpp's pooling key.

llama.cpp's embedding output is the pooled token states (after the Dense layers, where the family has a slot for
them); it normalizes them itself when asked (llama-cpp-python's `embed(normalize=True)`), so a Normalize module needs
no tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MethodType
from typing import Any, Dict, List

import mlx.core as mx
import numpy as np

from ..gguf.convert import family_for, gguf_tensors, write_gguf
from ..gguf.converters.embeddings import DENSE_KEY
from ..gguf.families import POOLING_KEY
from ..gguf.file_types import UNIFORM_TYPES, file_label, llama_file_type, resolve_method
from ..gguf.registry import embedding_converters
from ..gguf.vocabularies import embedding_vocabulary_keys
from ..models import hub
from .backbone import hub_names
from .saving import merged_backbone_weights


def _refuse(model: Any, methods: List[str]) -> None:
    if len(model.spec.pooling) != 1:
        raise NotImplementedError(
            f"save_pretrained_gguf on MLX: llama.cpp pools by one mode, not {'+'.join(model.spec.pooling)}"
        )
    for method in methods:
        if method not in UNIFORM_TYPES:
            raise NotImplementedError(
                f"save_pretrained_gguf(quantization_method={method!r}) for an embedding model on MLX: "
                f"one of {', '.join(UNIFORM_TYPES)}"
            )


def export_config(model: Any) -> Dict[str, Any]:
    """The backbone's config with the folder's pooling and Dense shapes, as the embedding converters read them."""
    config = json.loads((model.source_folder() / "config.json").read_text(encoding="utf-8"))
    config[POOLING_KEY] = model.spec.pooling[0]
    config[DENSE_KEY] = [
        {"in": layer.in_features, "out": layer.out_features, "bias": layer.bias, "activation": layer.activation}
        for layer in model.spec.dense
    ]
    return config


def _weights(model: Any) -> Dict[str, np.ndarray]:
    weights = hub_names(model.config.model_type, merged_backbone_weights(model))
    weights.update({f"dense.{index}.weight": layer.linear.weight for index, layer in enumerate(model.dense)})
    return {name: np.array(value.astype(mx.float32)) for name, value in weights.items()}


def save_pretrained_gguf(
    model: Any, save_directory: str, tokenizer: Any = None, quantization_method: Any = "fast_quantized", **kwargs: Any
) -> List[Path]:
    """`unsloth.<TYPE>.gguf` per method in `save_directory`, with the tokenizer and config they are built from."""
    if kwargs:
        raise NotImplementedError(f"save_pretrained_gguf for an embedding model does not support {sorted(kwargs)}")
    requested = quantization_method if isinstance(quantization_method, (list, tuple)) else [quantization_method]
    methods = [resolve_method(method) for method in requested]
    _refuse(model, methods)
    config = export_config(model)
    family_for(config)  # the converter's own refusals, before anything is written
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    (tokenizer or model.tokenizer).save_pretrained(str(folder))
    converter = embedding_converters()[config["model_type"]]
    keys = embedding_vocabulary_keys(folder, int(config["vocab_size"]), converter.vocabularies)
    tensors = gguf_tensors(_weights(model), config)
    paths = []
    for method in dict.fromkeys(methods):
        path = folder / f"unsloth.{file_label(method)}.gguf"
        write_gguf(path, tensors, config, keys, UNIFORM_TYPES[method][0], llama_file_type(method))
        paths.append(path)
    return paths


def attach_gguf(model: Any) -> None:
    model.save_pretrained_gguf = MethodType(save_pretrained_gguf, model)
    model.push_to_hub_gguf = MethodType(hub.push_to_hub_gguf, model)
