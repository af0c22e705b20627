# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Vision and audio projectors written as llama.cpp's `mmproj` GGUF, one module per family in `families/`, each
registered by its `model_type` (`registry`); `mmproj` writes the file, `multimodal` the language model's GGUFs and the
projector's."""

from . import families  # noqa: F401  registers the families
from .coverage import projector_for
from .registry import PROJECTORS, ProjectorFamily, register

__all__ = ["PROJECTORS", "ProjectorFamily", "projector_for", "register"]
