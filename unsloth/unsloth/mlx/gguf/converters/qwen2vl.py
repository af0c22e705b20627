# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Qwen 2 VL's and Qwen 2.5 VL's language model as llama.cpp's qwen2vl: Qwen 2's layers with a multimodal rope,
whose `mrope_section` llama.cpp reads as `rope.dimension_sections` (text positions are equal in every section, so a
text-only model rotates as Qwen 2 does)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..families import Family, UnsupportedModel
from .base import Converter, head_dim, rope_parameters

# The rope types a Qwen VL config names for its multimodal rope; llama.cpp's qwen2vl applies it from the sections.
_MROPE_TYPES = {"mrope", "default"}


def _rope(config: Dict[str, Any]) -> Dict[str, Any]:
    return dict(config.get("rope_scaling") or rope_parameters(config) or {})


def rope_sections(config: Dict[str, Any]) -> List[int]:
    """llama.cpp's four rope sections: the config's three (temporal, height, width) and an empty fourth."""
    sections = [int(size) for size in _rope(config).get("mrope_section") or ()]
    return (sections + [0, 0, 0, 0])[:4]


class Qwen2VL(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        model_type = config.get("model_type")
        kind = _rope(config).get("rope_type", _rope(config).get("type", "default"))
        if kind not in _MROPE_TYPES:
            raise UnsupportedModel(
                f"{model_type} with rope type {kind!r}: only Qwen VL's plain multimodal rope is checked here"
            )
        sections = rope_sections(config)
        if 2 * sum(sections) != head_dim(config):
            shown = [size for size in sections if size] or sections
            raise UnsupportedModel(
                f"{model_type} whose mrope_section {shown} covers {2 * sum(sections)} of its {head_dim(config)} rotary "
                "dimensions: llama.cpp's qwen2vl rotates the whole head by its sections"
            )

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # the multimodal rope is written as its sections, refused above when anything else

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        writer.add_rope_dimension_sections(rope_sections(config))


CONVERTERS = {
    "qwen2_vl_text": Qwen2VL(Family("qwen2vl")),
    "qwen2_5_vl_text": Qwen2VL(Family("qwen2vl")),
}
