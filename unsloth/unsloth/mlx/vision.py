# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The vision names CUDA notebooks import, present on MLX so the import works, refusing by name when used."""

from __future__ import annotations

from typing import Any, NoReturn

ADVICE = "vision fine-tuning runs on CUDA Unsloth only; on MLX, load a text model with FastLanguageModel"


def _refuse(what: str) -> NoReturn:
    raise NotImplementedError(f"{what} is not available on MLX: {ADVICE}")


class FastVisionModel:
    @staticmethod
    def from_pretrained(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse("FastVisionModel.from_pretrained")

    @staticmethod
    def get_peft_model(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse("FastVisionModel.get_peft_model")

    @staticmethod
    def for_training(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse("FastVisionModel.for_training")

    @staticmethod
    def for_inference(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse("FastVisionModel.for_inference")


class UnslothVisionDataCollator:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse("UnslothVisionDataCollator")
