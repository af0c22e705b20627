# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The table of projector families: each is a `ProjectorFamily` registered under the `model_type` of the
vision-language config it reads, as llama.cpp's converter registers its `MmprojModel` subclasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Tuple

import numpy as np


class ProjectorFamily:
    """One family's projector: the language model inside its config and weights, the projector's tensors under
    llama.cpp's names, the `clip.*` keys, and the tensors llama.cpp's converter stores in a type of their own.
    `refuse` names the settings llama.cpp's graph for it does not reproduce, before any work."""

    projector_type: str = ""  # a gguf.VisionProjectorType value
    # Families whose file can carry an audio projector too name the vision one under clip.vision.projector_type.
    per_encoder_type: bool = False
    # llama.cpp name -> GGML type name, whatever the file's type (llama.cpp's `tensor_force_quant`).
    forced_types: Mapping[str, str] = {}
    # Why the pinned llama.cpp runs the written file otherwise than MLX runs the model: non-empty refuses every config.
    llama_cpp_differs: str = ""

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        raise NotImplementedError

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        """The projector's tensors from every weight of the model (`folder` holds its saved tokenizer)."""
        raise NotImplementedError

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The vision config the shared `clip.vision.*` keys are written from (a family may adjust it as llama.cpp's
        converter does)."""
        return dict(config["vision_config"])

    def common_settings(
        self, config: Dict[str, Any], preprocessor: Dict[str, Any]
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The vision config and the processor's settings the shared keys are written from (a family whose
        converter derives them from the processor's settings overrides this)."""
        return self.vision_settings(config), preprocessor

    def refuse(self, config: Dict[str, Any]) -> None:
        """Raise `UnsupportedProjector` for a setting llama.cpp's projector graph does not reproduce."""

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        raise NotImplementedError


PROJECTORS: Dict[str, ProjectorFamily] = {}


def float32(value: Any) -> np.ndarray:
    """A weight (an MLX or numpy array) as float32 numpy."""
    if hasattr(value, "astype") and not isinstance(value, np.ndarray):
        import mlx.core as mx

        value = value.astype(mx.float32)
    return np.array(value, dtype=np.float32)


def register(*model_types: str) -> Callable[[type], type]:
    """Class decorator: one instance of the family answers for each of `model_types`."""

    def add(family: type) -> type:
        for model_type in model_types:
            PROJECTORS[model_type] = family()
        return family

    return add


class UnsupportedProjector(NotImplementedError):
    """The model's projector has no mmproj form here."""


def refuse_patch_grid(config: Dict[str, Any], graph: str, frames: int, merge: int) -> None:
    """Refuse a tower whose patch embedding spans other than `frames` frames or whose merger joins other than
    `merge` x `merge` patches: llama.cpp's `graph` hard-codes both (Qwen 2 VL's and GLM-4.1V's)."""
    vision, model_type = config["vision_config"], config.get("model_type")
    if int(vision.get("temporal_patch_size", frames)) != frames:
        raise UnsupportedProjector(
            f"{model_type} with temporal_patch_size={vision['temporal_patch_size']}: llama.cpp splits the patch "
            f"embedding in {frames} frames"
        )
    if int(vision.get("spatial_merge_size", merge)) != merge:
        raise UnsupportedProjector(
            f"{model_type} with spatial_merge_size={vision['spatial_merge_size']}: llama.cpp's {graph} graph merges "
            f"{merge}x{merge} patches"
        )
