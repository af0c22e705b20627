# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A vision or audio model's GGUF export, as CUDA Unsloth writes it: the language model's files in every requested
type (`export.write_files`), then the projector's `unsloth.<F16|BF16>-mmproj.gguf`, last in the returned list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx

from ..export import check_request, write_files
from .mmproj import write_mmproj
from .coverage import projector_for

# Ollama takes no separate projector file: CUDA Unsloth's Modelfile names the folder, to hold the merged model.
OLLAMA_NOTE = (
    "Ollama does not read a separate mmproj file: put the Modelfile beside the merged 16-bit model "
    "(save_pretrained_merged) and run `ollama create model_name -f ./Modelfile` there"
)


def check_multimodal_request(config: Dict[str, Any], save_directory: str | Path, requested: List[Any]) -> None:
    """Every refusal, before any work: the projector's family, then the language model's as text GGUF checks it."""
    text_config, _ = projector_for(config).language(config, {})
    check_request(text_config, save_directory, requested)


def mmproj_file_type(weights: Dict[str, mx.array]) -> str:
    """The model's own 16-bit type, as CUDA Unsloth passes llama.cpp's converter; F16 for a float32 model."""
    return "bf16" if any(value.dtype == mx.bfloat16 for value in weights.values()) else "f16"


def write_multimodal_files(
    config: Dict[str, Any],
    weights: Dict[str, mx.array],
    preprocessor: Dict[str, Any],
    save_directory: str | Path,
    tokenizer: Any,
    requested: List[Any],
) -> List[Path]:
    """The language model's GGUF per requested method, then the projector's; paths in that order."""
    family = projector_for(config)
    text_config, text_weights = family.language(config, weights)
    folder = Path(save_directory)
    paths = write_files(text_config, text_weights, folder, tokenizer, requested, modelfile_location=".")
    file_type = mmproj_file_type(weights)
    mmproj = folder / f"unsloth.{file_type.upper()}-mmproj.gguf"
    try:
        write_mmproj(mmproj, family, config, weights, preprocessor, file_type)
    except BaseException:
        mmproj.unlink(missing_ok=True)  # no half-written file
        raise
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return [*paths, mmproj]
