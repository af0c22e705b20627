# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The public trainer API on Apple silicon (MLX): CUDA notebooks' calls, run by the zoo's MLX backend.

Importing this package loads nothing heavy; each name below loads its module on first use, and `activation`
needs only the standard library, so `unsloth` can ask whether to switch before anything imports mlx or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "UnslothTrainingArguments": "arguments",
    "UnslothTrainer": "trainer",
    "FastLanguageModel": "models",
    "FastModel": "fast_model",
    "get_chat_template": "chat_templates",
    "train_on_responses_only": "responses_only",
    "is_bfloat16_supported": "memory",
    "memory_stats": "memory",
    "mem_get_info": "memory",
    "reset_peak_memory_stats": "memory",
    "empty_cache": "memory",
    "save_pretrained_gguf": "gguf",
    "load_gguf_model": "gguf_reload",
    "SFTConfig": "trl_shim",
    "get_gpu_memory_stats": "memory",
    "clear_gpu_memory": "memory",
    "save_pretrained_merged": "merged",
    "RawTextDataLoader": "raw_text",
    "TextPreprocessor": "raw_text",
    "FastVisionModel": "vision",
    "UnslothVisionDataCollator": "vision",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    globals()[name] = value
    return value
