# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What a family's converter is built from (`Family`: the llama.cpp architecture and its flags), the wrappers
exported as their language model, and what is known by hand about the types not exported.

The families themselves are registered by their modules in `converters/` (collected by `registry`); everything else about a model type (which architecture llama.cpp's converter writes for it, whether the `gguf`
package and llama.cpp's loader know that architecture) is derived in `coverage` from the libraries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


# An embedding export's sentence pooling, kept by sentence-transformers outside config.json (`1_Pooling`): its saver
# passes it in the config under this key, which also picks the embedding converters (`registry`).
POOLING_KEY = "sentence_pooling"


class UnsupportedModel(NotImplementedError):
    """The model's architecture or one of its settings has no GGUF form here."""


@dataclass(frozen=True)
class Family:
    """How one Hugging Face `model_type` becomes a llama.cpp architecture."""

    architecture: str
    permute_rotary: bool = False  # llama.cpp's llama graph expects the query/key rows interleaved per head
    norm_offset: float = 0.0  # Gemma's norms scale by 1 + weight, llama.cpp's by the stored weight
    tied_only: bool = False  # llama.cpp's graph has no separate output matrix
    output_required: bool = False  # llama.cpp's loader requires the output matrix: a tied model writes a copy
    key: str = ""  # the gguf.MODEL_ARCH member, where it is not the architecture's name in capitals
    yarn: bool = False  # llama.cpp's graph for it applies YaRN from the rope.scaling keys, as mlx_lm does
    yarn_log_mul: bool = False  # llama.cpp reads YaRN's mscale_all_dim for it (as rope.scaling.yarn_log_multiplier)

    @property
    def arch(self) -> Any:
        import gguf

        return gguf.MODEL_ARCH[self.key or self.architecture.upper()]


# Vision-language wrappers mlx_lm loads as their language model alone: that model's config key and weight prefix.
TEXT_WRAPPERS = {
    "mistral3": ("text_config", "language_model."),
    "gemma4": ("text_config", "language_model."),
    "qwen3_5": ("text_config", "language_model."),
    "qwen3_5_moe": ("text_config", "language_model."),
    "qwen2_vl": ("text_config", "language_model."),
    "qwen2_5_vl": ("text_config", "language_model."),
    "qwen3_vl": ("text_config", "language_model."),
    "qwen3_vl_moe": ("text_config", "language_model."),
    "gemma3n": ("text_config", "model.language_model."),
    "llama4": ("text_config", "language_model."),
    "glm4v": ("text_config", "language_model."),
    "glm4v_moe": ("text_config", "language_model."),
    "glm_ocr": ("text_config", "language_model."),
    "llava": ("text_config", "language_model."),  # mlx_lm runs it as mistral3: llama's text model
    "kimi_vl": ("text_config", "language_model."),  # DeepSeek V3's text model, as mlx_lm runs both
    "kimi_k25": ("text_config", "language_model."),
}
# Wrappers whose language model's weights keep a prefix of their own once the wrapper's is removed.
_INNER_PREFIX = {"gemma3n": "model."}
# Wrappers whose language model is exported under a type of its own: Llama 4's text_config says llama4_text, which
# mlx_lm loads alone as a different, dense model.
_INNER_TYPES = {"llama4": "llama4_wrapped_text"}
# Wrappers whose language model's GGUF keys read a sub-config of the wrapper's (Qwen 3 VL's deepstack layer count).
_CARRIED_CONFIGS = {"qwen3_vl": ("vision_config",), "qwen3_vl_moe": ("vision_config",)}
# Wrappers whose outer vocab_size mlx_lm copies into the language model's config.
_OUTER_VOCAB = {"gemma4"}
# Wrappers mlx_lm also loads from a flat config, read as their language model's own type.
_FLAT_TEXT_TYPES = {
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
}


def unwrap_text_model(config: Dict[str, Any], weights: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], Dict]:
    """The language model's own config and weights, for a wrapper in TEXT_WRAPPERS; anything else as it is."""
    wrapper = TEXT_WRAPPERS.get(str(config.get("model_type")))
    if wrapper is None:
        return config, dict(weights or {})
    key, prefix = wrapper
    if key not in config and config.get("model_type") in _FLAT_TEXT_TYPES:
        config = {**config, key: {**config, "model_type": _FLAT_TEXT_TYPES[str(config["model_type"])]}}
    inner = {"tie_word_embeddings": False, **config[key]}  # as mlx_lm builds it
    if config.get("model_type") in _INNER_TYPES:
        inner["model_type"] = _INNER_TYPES[str(config["model_type"])]
    for carried in _CARRIED_CONFIGS.get(str(config.get("model_type")), ()):
        inner.setdefault(carried, config.get(carried) or {})
    if config.get("model_type") in _OUTER_VOCAB and config.get("vocab_size"):
        inner["vocab_size"] = config["vocab_size"]
        inner["tie_word_embeddings"] = config[key].get("tie_word_embeddings", True)  # Gemma 4 ties by default
    inner_prefix = _INNER_PREFIX.get(str(config.get("model_type")), "")
    named = {
        inner_prefix + name.removeprefix(prefix) if name.startswith(prefix) else name: value
        for name, value in (weights or {}).items()
    }
    return inner, named


# Why a type llama.cpp loads is still refused, where more is known than "no converter here yet".
NOTES: Dict[str, str] = {
    "gemma3": "a vision-language config: export its language model saved as gemma3_text",
    "falcon_mamba": "mlx_lm runs it as mamba with its time step, B and C normed with mixer_rms_eps (1e-6 by default), "
    "llama.cpp's mamba with the layers' epsilon (1e-5 in mlx_lm's norms), so every block would scan other values",
    "gemma4_unified": "its encoder-free vision layout is not read here: export the language model saved as gemma4_text",
    "llama4_text": "mlx_lm's llama4_text is a dense model, and llama.cpp's llama4 refuses a model without experts: Llama 4 "
    "itself (the llama4 wrapper, its experts included) is exported",
    "olmo": "mlx_lm's olmo reads the original OLMo layout (`d_model`, `att_proj`) and needs the ai2-olmo package to "
    "import, and llama.cpp's converter reads transformers' OlmoForCausalLM names; the two are not checked against each "
    "other here",
    "bitnet": "mlx_lm's bitnet multiplies its packed ternary weights in a Metal kernel, so the model cannot run here "
    "to be checked against llama.cpp's bitnet",
    "phimoe": "llama.cpp's phimoe routes by a renormalized softmax top-k, mlx_lm's by PhiMoE's sparsemixer, so the "
    "exported model would pick and weigh its experts differently",
}
