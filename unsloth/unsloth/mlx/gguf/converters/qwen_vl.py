# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The vision-language models' language models with a multimodal rope: Qwen 2 VL's and Qwen 2.5 VL's as llama.cpp's
qwen2vl (Qwen 2's layers), Qwen 3 VL's as qwen3vl (Qwen 3's, its sections interleaved and its tower's deepstack
features added to the first layers), Qwen 3 VL MoE's as qwen3vlmoe (the same, with Qwen 3 MoE's experts), and
GLM-4.1V's as glm4 (GLM-4's layers, the rotated part of each head reordered from GLM's adjacent pairs to the halves
llama.cpp's multimodal rope pairs; GLM-OCR's likewise) and GLM-4.5V's as glm4moe (GLM-4.5's experts). Each rotates by a multimodal rope whose `mrope_section` llama.cpp reads as
`rope.dimension_sections`; text positions are equal in every section, so a text-only model rotates as its text
family does."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ..families import Family, UnsupportedModel
from .base import Converter, head_dim, rope_parameters
from .experts import Glm4Moe

# The rope types a Qwen VL config names for its multimodal rope; llama.cpp's qwen2vl applies it from the sections.
_MROPE_TYPES = {"mrope", "default"}


def _rope(config: Dict[str, Any]) -> Dict[str, Any]:
    return dict(config.get("rope_scaling") or rope_parameters(config) or {})


def rope_sections(config: Dict[str, Any]) -> List[int]:
    """llama.cpp's four rope sections: the config's three (temporal, height, width) and an empty fourth."""
    sections = [int(size) for size in _rope(config).get("mrope_section") or ()]
    return (sections + [0, 0, 0, 0])[:4]


def deepstack_layers(config: Dict[str, Any]) -> int:
    """How many of the tower's layers feed the language model's first layers (Qwen 3 VL's deepstack)."""
    return len((config.get("vision_config") or {}).get("deepstack_visual_indexes") or ())


class QwenVL(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        model_type = config.get("model_type")
        kind = _rope(config).get("rope_type", _rope(config).get("type", "default"))
        if kind not in _MROPE_TYPES:
            raise UnsupportedModel(
                f"{model_type} with rope type {kind!r}: only Qwen VL's multimodal rope is checked here"
            )
        sections = rope_sections(config)
        if 2 * sum(sections) != head_dim(config):
            raise UnsupportedModel(
                f"{model_type} whose mrope_section {_rope(config).get('mrope_section')} covers {2 * sum(sections)} of its {head_dim(config)} rotary "
                "dimensions: llama.cpp rotates the whole head by its sections"
            )

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # the multimodal rope is written as its sections, refused above when anything else

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)  # the expert counts, where it has experts
        writer.add_rope_dimension_sections(rope_sections(config))


class Qwen3VL(QwenVL):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if _rope(config).get("mrope_interleaved") is False:
            raise UnsupportedModel(
                f"{config.get('model_type')} with mrope_interleaved=False: llama.cpp's qwen3vl interleaves the sections"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_num_deepstack_layers(deepstack_layers(config))


class Qwen3VLMoe(Qwen3VL):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        model_type = config.get("model_type")
        if config.get("norm_topk_prob") is False:
            raise UnsupportedModel(f"{model_type} with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if config.get("mlp_only_layers") or int(config.get("decoder_sparse_step") or 1) != 1:
            raise UnsupportedModel(
                f"{model_type} with dense layers (mlp_only_layers, decoder_sparse_step): llama.cpp's qwen3vlmoe "
                "gives every layer experts"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))


class GlmMultimodalRope(Converter):
    """GLM-4.1V's, GLM-4.5V's and GLM-OCR's multimodal rope: a part of each head rotated by sections, the config's
    `partial_rotary_factor` of it (`rotated` when absent, as mlx-vlm and llama.cpp's converter read it)."""

    rotated = 0.5

    def refuse(self, config: Dict[str, Any]) -> None:
        model_type = config.get("model_type")
        kind = _rope(config).get("rope_type", _rope(config).get("type", "default"))
        if kind not in _MROPE_TYPES:
            raise UnsupportedModel(
                f"{model_type} with rope type {kind!r}: only GLM-4V's multimodal rope is checked here"
            )
        if 2 * sum(rope_sections(config)) != self.rotary_dims(config):
            raise UnsupportedModel(
                f"{model_type} whose mrope_section {_rope(config).get('mrope_section')} covers "
                f"{2 * sum(rope_sections(config))} of its {self.rotary_dims(config)} rotary dimensions: llama.cpp "
                "rotates them all by its sections"
            )
        super().refuse(config)

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        factor = config.get("partial_rotary_factor") or _rope(config).get("partial_rotary_factor") or self.rotated
        return int(head_dim(config) * float(factor))

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # the multimodal rope is written as its sections, refused above when anything else

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_rope_dimension_sections(rope_sections(config))


class Glm4V(GlmMultimodalRope):
    """GLM-4.1V's language model, GLM-4's: its sections rotate adjacent pairs (mlx-vlm's `sectioned_even_odd`), which
    llama.cpp's multimodal rope pairs as halves, so its query and key rows are reordered."""

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Any]:
        heads = {"q_proj": "num_attention_heads", "k_proj": "num_key_value_heads"}
        projection = name.split(".")[-2]
        if ".self_attn." in name and projection in heads:
            data = pairs_as_halves(data, int(config[heads[projection]]), head_dim(config), self.rotary_dims(config))
        return super().split_weight(name, data, config)


class GlmOcr(Glm4V):
    """GLM-OCR's language model: GLM-4.1V's, each whole head rotated by default; mlx-vlm drops its multi-token
    prediction layer, which llama.cpp's glm4 would load but not run."""

    rotated = 1.0


class Glm4VMoe(GlmMultimodalRope, Glm4Moe):
    """GLM-4.5V's language model, GLM-4.5's experts: its sections already rotate halves (`sectioned_half_split`)."""


def pairs_as_halves(weight: np.ndarray, heads: int, dims: int, rotary: int) -> np.ndarray:
    """Each head's first `rotary` rows from adjacent pairs (GLM) to halves: the even rows, then the odd ones."""
    split = weight.reshape(heads, dims, *weight.shape[1:])
    rotated = split[:, :rotary]
    reordered = np.concatenate([rotated[:, 0::2], rotated[:, 1::2], split[:, rotary:]], axis=1)
    return reordered.reshape(weight.shape)


CONVERTERS = {
    "qwen2_vl_text": QwenVL(Family("qwen2vl")),
    "qwen2_5_vl_text": QwenVL(Family("qwen2vl")),
    "qwen3_vl_text": Qwen3VL(Family("qwen3vl")),
    "qwen3_vl_moe_text": Qwen3VLMoe(Family("qwen3vlmoe")),
    "glm4v_text": Glm4V(Family("glm4")),
    "glm4v_moe_text": Glm4VMoe(Family("glm4moe", key="GLM4_MOE")),
    "glm_ocr_text": GlmOcr(Family("glm4")),
}
