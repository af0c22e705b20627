# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whether a vision or audio family's projector can be written as an mmproj GGUF here, and if not why, derived from
the pinned llama.cpp's converter (`llama_cpp_projectors`, generated), the installed `gguf` package's projector types
and the families registered here. docs/gguf.md's multimodal table is rendered from `projector_verdict`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, Tuple

from ..coverage import _CLASS_ENDINGS, _candidates, _normal
from . import llama_cpp_projectors
from .registry import PROJECTORS, ProjectorFamily, UnsupportedProjector


@dataclass(frozen=True)
class ProjectorVerdict:
    model_type: str
    projector_types: Tuple[str, ...]  # the gguf.VisionProjectorType members llama.cpp's converter writes for it
    gguf_knows: bool
    exported: bool
    reason: str  # why it is refused; empty when exported

    @property
    def projector_values(self) -> Tuple[str, ...]:
        return tuple(kind.lower() for kind in self.projector_types)


def llama_cpp_projector_types(model_type: str, class_names: Iterable[str] = ()) -> Tuple[str, ...]:
    """The projector types llama.cpp's converter writes for a config of this type (`class_names`: its
    `architectures`); empty when it has no mmproj converter for it."""
    known = llama_cpp_projectors.PROJECTORS
    for name in [*class_names, *_candidates(model_type)]:
        if name in known:
            return known[name]
    for ending in _CLASS_ENDINGS:  # transformers does not know every family mlx-vlm does: match the spelling
        for name, kinds in known.items():
            if name.endswith(ending) and _normal(name[: -len(ending)]) == _normal(model_type):
                return kinds
    return ()


def _gguf_projector_types() -> frozenset:
    try:
        import gguf
    except ImportError:
        return frozenset()
    return frozenset(name for name in vars(gguf.VisionProjectorType) if not name.startswith("_"))


def projector_verdict(model_type: str, class_names: Iterable[str] = ()) -> ProjectorVerdict:
    """What happens to a vision or audio model of this type on `save_pretrained_gguf`, and why."""
    kinds = llama_cpp_projector_types(model_type, class_names)
    missing = [kind for kind in kinds if kind not in _gguf_projector_types()]
    pinned = f"llama.cpp (llama-cpp-python {llama_cpp_projectors.LLAMA_CPP_PYTHON})"
    if model_type in PROJECTORS:
        differs = PROJECTORS[model_type].llama_cpp_differs
        return ProjectorVerdict(model_type, kinds, not missing, not differs, differs)
    if not kinds:
        reason = f"{pinned} has no mmproj converter for it"
    elif missing:
        reason = f"the installed gguf package has no projector type {', '.join(missing)}"
    else:
        written = " or ".join(kind.lower() for kind in kinds)
        reason = f"{pinned} writes its projector as {written}, but this exporter has no projector converter for it yet"
    return ProjectorVerdict(model_type, kinds, bool(kinds) and not missing, False, reason)


def exported_projectors() -> Tuple[str, ...]:
    """The registered families whose file llama.cpp runs as MLX runs the model."""
    return tuple(sorted(name for name, family in PROJECTORS.items() if not family.llama_cpp_differs))


def projector_for(config: Dict[str, Any]) -> ProjectorFamily:
    """The registered family for this config, or a refusal naming why (docs/gguf.md's multimodal table)."""
    model_type = str(config.get("model_type"))
    if model_type in PROJECTORS and not PROJECTORS[model_type].llama_cpp_differs:
        PROJECTORS[model_type].refuse(config)
        return PROJECTORS[model_type]
    # llama.cpp's converter picks the projector's class from the vision config's own architectures first.
    names = [*((config.get("vision_config") or {}).get("architectures") or ()), *(config.get("architectures") or ())]
    reason = projector_verdict(model_type, names).reason
    raise UnsupportedProjector(
        f"GGUF export of a vision or audio model on MLX cannot write the projector of model_type {model_type!r}: "
        f"{reason} (docs/gguf.md lists every family; exported: {', '.join(exported_projectors())}). "
        "save_pretrained_merged saves the merged model; for a GGUF of the language model alone, load it with "
        "FastModel.from_pretrained(..., text_only=True) or FastLanguageModel.from_pretrained(..., text_only=True)"
    )
