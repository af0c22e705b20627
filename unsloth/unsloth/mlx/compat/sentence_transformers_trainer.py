# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""sentence-transformers' `SentenceTransformerTrainer` given an MLX embedding model builds the MLX trainer.

As with transformers' `Trainer` (`transformers_trainer.py`), the class stays sentence-transformers' own and only its
`__new__` is patched: a torch `SentenceTransformer` still gets the real trainer, while the model
`FastSentenceTransformer` loads on MLX gets `EmbeddingTrainer`, which reads the same arguments, loss and datasets.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .transformers_trainer import ROUTED_MARK, is_mlx_model

TRAINER = "SentenceTransformerTrainer"
# Where sentence-transformers defines the trainer: 6.x, then the older single-module layout.
TRAINER_MODULES = ("sentence_transformers.sentence_transformer.trainer", "sentence_transformers.trainer")
# SentenceTransformerTrainer.__init__'s order after `model`.
ORDER = ("args", "train_dataset", "eval_dataset", "loss", "evaluator", "callbacks")


def _routing_new(kind: type) -> Any:
    original = kind.__dict__.get("__new__")

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        model = kwargs["model"] if "model" in kwargs else args[0] if args else None
        if is_mlx_model(model):
            from ..embeddings.trainer import EmbeddingTrainer

            if cls is not kind:
                raise NotImplementedError(
                    f"{cls.__name__} (a subclass of SentenceTransformerTrainer) cannot train an MLX model: its "
                    "overrides run torch; use SentenceTransformerTrainer itself"
                )
            positional = args[1:] if "model" not in kwargs else args
            named = dict(zip(ORDER, positional))
            named.update({name: value for name, value in kwargs.items() if name != "model"})
            return EmbeddingTrainer(model, **named)
        if original is not None:
            return original.__func__(cls, *args, **kwargs)
        return object.__new__(cls)

    setattr(__new__, ROUTED_MARK, True)
    return staticmethod(__new__)


def route_sentence_transformers(module: ModuleType) -> None:
    """Patch the module's `SentenceTransformerTrainer` so an MLX model gets the MLX trainer; idempotent."""
    kind = vars(module).get(TRAINER)
    if kind is None:
        return
    current = kind.__dict__.get("__new__")
    if getattr(getattr(current, "__func__", current), ROUTED_MARK, False):
        return
    kind.__new__ = _routing_new(kind)
