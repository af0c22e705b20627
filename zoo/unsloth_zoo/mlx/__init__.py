# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""The MLX training backend: `MLXTrainer`, `MLXTrainingConfig`, LoRA and model loading on `mlx`.

Importing this package is cheap and never imports `torch`; `mlx` and `mlx_lm` load when a name below is first used.

    model, tokenizer = load_model("path/to/model_folder")
    apply_lora(model, rank=16, alpha=16)
    trainer = MLXTrainer(model, tokenizer, dataset, args=MLXTrainingConfig(max_steps=60), callbacks=[ProgressCallback])
    trainer.train()
"""

from __future__ import annotations

import importlib
from typing import Any

from .gate import BackendDecision, decide_backend, use_mlx_backend

_LAZY = {
    "MLXTrainer": "trainer",
    "TrainOutput": "trainer",
    "MLXTrainingConfig": "config",
    "TrainerState": "callbacks",
    "TrainerControl": "callbacks",
    "FlowCallback": "callbacks",
    "apply_lora": "lora",
    "load_model": "loading",
}

__all__ = ["BackendDecision", "decide_backend", "use_mlx_backend", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value
