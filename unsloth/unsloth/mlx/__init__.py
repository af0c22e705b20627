# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The public trainer API on Apple silicon (MLX): CUDA notebooks' calls, run by the zoo's MLX backend.

Importing this package loads nothing heavy; each name below loads its module on first use, and `activation`
needs only the standard library, so `unsloth` can ask whether to switch before anything imports mlx or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# Older notebooks' per-family entry points (in `vision.fast_model`), each FastLanguageModel on MLX.
FAMILY_ENTRY_POINTS = (
    "FastLlamaModel",
    "FastMistralModel",
    "FastQwen2Model",
    "FastQwen3Model",
    "FastQwen3MoeModel",
    "FastGemmaModel",
    "FastGemma2Model",
    "FastCohereModel",
    "FastGraniteModel",
    "FastFalconH1Model",
    "FastTextModel",
)

_PUBLIC = {
    "UnslothTrainingArguments": "training.arguments",
    "UnslothTrainer": "training.trainer",
    "FastLanguageModel": "vision.fast_model",
    "FastModel": "embeddings.classifier_notebook",
    "get_chat_template": "chat.templates",
    "train_on_responses_only": "chat.responses_only",
    "is_bfloat16_supported": "compat.memory",
    "memory_stats": "compat.memory",
    "mem_get_info": "compat.memory",
    "reset_peak_memory_stats": "compat.memory",
    "empty_cache": "compat.memory",
    "save_pretrained_gguf": "models.merged",
    "load_gguf_model": "gguf.reload",
    "SFTConfig": "compat.trl_shim",
    "get_gpu_memory_stats": "compat.memory",
    "clear_gpu_memory": "compat.memory",
    "save_pretrained_merged": "models.merged",
    "RawTextDataLoader": "training.raw_text",
    "TextPreprocessor": "training.raw_text",
    "FastVisionModel": "vision.model",
    "FastSentenceTransformer": "embeddings.fast_sentence_transformer",
    "UnslothVisionDataCollator": "vision.model",
    "PatchDPOTrainer": "rl.patches",
    "PatchFastRL": "rl.patches",
    **{name: "vision.fast_model" for name in FAMILY_ENTRY_POINTS},
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    globals()[name] = value
    return value
