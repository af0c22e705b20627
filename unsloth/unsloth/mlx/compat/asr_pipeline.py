# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""transformers' `pipeline("automatic-speech-recognition", model=<MLX Whisper>, ...)` gives the MLX transcriber
(`speech.transcribe`); every other call, a torch model's included, reaches transformers' own `pipeline`."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

from .transformers_trainer import ROUTED_MARK, is_mlx_model

ASR_TASK = "automatic-speech-recognition"


def _mlx_whisper_pipeline(model: Any, kwargs: dict) -> Any:
    from ..speech.transcribe import NO_EFFECT, WhisperTranscriber

    processor = kwargs.pop("processor", None)
    tokenizer = kwargs.pop("tokenizer", None) or getattr(processor, "tokenizer", None)
    feature_extractor = kwargs.pop("feature_extractor", None) or getattr(processor, "feature_extractor", None)
    if tokenizer is None or feature_extractor is None:
        raise TypeError("the MLX Whisper pipeline needs tokenizer= and feature_extractor= (or processor=)")
    ignored = sorted(name for name in kwargs if name in NO_EFFECT)
    if ignored:
        warnings.warn(f"{', '.join(ignored)}: no effect on MLX", RuntimeWarning, stacklevel=3)
    unknown = sorted(name for name in kwargs if name not in NO_EFFECT)
    if unknown:
        raise NotImplementedError(f"the MLX Whisper pipeline cannot honour {', '.join(unknown)}")
    return WhisperTranscriber(model, tokenizer, feature_extractor)


def route_pipeline(module: ModuleType) -> None:
    """Wrap `module.pipeline` (transformers.pipelines') once, so an MLX model's speech task runs on MLX."""
    original = getattr(module, "pipeline", None)
    if original is None or getattr(original, ROUTED_MARK, False):
        return

    def pipeline(task: Any = None, model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not is_mlx_model(model):
            return original(task, model, *args, **kwargs)
        from ..speech.whisper import is_whisper

        if task != ASR_TASK or args or not is_whisper(model):
            raise NotImplementedError(
                f"transformers' pipeline({task!r}) cannot run an MLX model; on MLX only "
                f"pipeline({ASR_TASK!r}, model=<a Whisper from FastModel.from_pretrained>) is built"
            )
        return _mlx_whisper_pipeline(model, kwargs)

    setattr(pipeline, ROUTED_MARK, True)
    pipeline.__doc__ = original.__doc__
    pipeline.__wrapped__ = original  # type: ignore[attr-defined]
    module.pipeline = pipeline  # type: ignore[attr-defined]
