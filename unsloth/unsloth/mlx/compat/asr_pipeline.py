# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""transformers' `pipeline("automatic-speech-recognition", model=<MLX Whisper>, ...)` gives the MLX transcriber
(`speech.transcribe`), and `pipeline("text-classification" / "sentiment-analysis", model=<MLX classifier>)` the
classifier's labels and scores as transformers' pipeline gives them; every other call, a torch model's included,
reaches transformers' own `pipeline`."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

from .transformers_trainer import ROUTED_MARK, is_mlx_model

ASR_TASK = "automatic-speech-recognition"
CLASSIFICATION_TASKS = ("text-classification", "sentiment-analysis")


class TextClassifier:
    """transformers' text-classification pipeline over the MLX classifier: the top label and its score, with
    softmax for single-label, sigmoid for one label or multi-label, none for regression (its defaults)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model, self.tokenizer = model, tokenizer

    def _scores(self, logits: Any) -> Any:
        import numpy as np

        config = self.model.hf_config
        kind = config.get("problem_type")
        if kind == "regression":
            return logits
        if kind == "multi_label_classification" or int(config["num_labels"]) == 1:
            return 1.0 / (1.0 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)

    def __call__(self, inputs: Any, **kwargs: Any) -> Any:
        import mlx.core as mx
        import numpy as np

        if kwargs:
            raise NotImplementedError(f"the MLX text-classification pipeline cannot honour {', '.join(sorted(kwargs))}")
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        was_training = self.model.training
        self.model.eval()
        encoded = self.tokenizer(texts, padding=True, truncation=True, return_tensors="np")
        logits = np.array(self.model(encoded["input_ids"], encoded["attention_mask"]).logits.astype(mx.float32))
        self.model.train(was_training)
        scores = self._scores(logits)
        labels = self.model.hf_config["id2label"]
        best = scores.argmax(axis=-1)
        return [{"label": labels[int(i)], "score": float(row[i])} for row, i in zip(scores, best)]


def _mlx_whisper_pipeline(model: Any, kwargs: dict) -> Any:
    from ..speech.transcribe import GENERATE_KEYWORDS, NO_EFFECT, WhisperTranscriber

    processor = kwargs.pop("processor", None)
    tokenizer = kwargs.pop("tokenizer", None) or getattr(processor, "tokenizer", None)
    feature_extractor = kwargs.pop("feature_extractor", None) or getattr(processor, "feature_extractor", None)
    if tokenizer is None or feature_extractor is None:
        raise TypeError("the MLX Whisper pipeline needs tokenizer= and feature_extractor= (or processor=)")
    generate_kwargs = dict(kwargs.pop("generate_kwargs", None) or {})
    generate_kwargs.update({name: kwargs.pop(name) for name in GENERATE_KEYWORDS if name in kwargs})
    ignored = sorted(name for name in kwargs if name in NO_EFFECT)
    if ignored:
        warnings.warn(f"{', '.join(ignored)}: no effect on MLX", RuntimeWarning, stacklevel=3)
    unknown = sorted(name for name in kwargs if name not in NO_EFFECT)
    if unknown:
        raise NotImplementedError(f"the MLX Whisper pipeline cannot honour {', '.join(unknown)}")
    return WhisperTranscriber(model, tokenizer, feature_extractor, generate_kwargs)


def route_pipeline(module: ModuleType) -> None:
    """Wrap `module.pipeline` (transformers.pipelines') once, so an MLX model's speech task runs on MLX."""
    original = getattr(module, "pipeline", None)
    if original is None or getattr(original, ROUTED_MARK, False):
        return

    def pipeline(task: Any = None, model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not is_mlx_model(model):
            return original(task, model, *args, **kwargs)
        from ..speech.whisper import is_whisper
        from .transformers_trainer import is_sequence_classifier

        if task in CLASSIFICATION_TASKS and is_sequence_classifier(model) and not args:
            tokenizer = kwargs.pop("tokenizer", None) or model.tokenizer
            if kwargs:
                raise NotImplementedError(f"pipeline({task!r}) on MLX cannot honour {', '.join(sorted(kwargs))}")
            return TextClassifier(model, tokenizer)
        if task != ASR_TASK or args or not is_whisper(model):
            raise NotImplementedError(
                f"transformers' pipeline({task!r}) cannot run an MLX model; on MLX only "
                f"pipeline({ASR_TASK!r}, model=<a Whisper from FastModel.from_pretrained>) and "
                f"pipeline('text-classification', model=<a classifier from FastModel.from_pretrained>) are built"
            )
        return _mlx_whisper_pipeline(model, kwargs)

    setattr(pipeline, ROUTED_MARK, True)
    pipeline.__doc__ = original.__doc__
    pipeline.__wrapped__ = original  # type: ignore[attr-defined]
    module.pipeline = pipeline  # type: ignore[attr-defined]
