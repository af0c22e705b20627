# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The families GGUF export converts, and what is known by hand about those it does not: one table.

Everything else about a model type (which architecture llama.cpp's converter writes for it, whether the `gguf`
package and llama.cpp's loader know that architecture) is derived in `coverage` from the libraries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


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


FAMILIES = {
    "llama": Family("llama", permute_rotary=True, yarn=True),
    "mistral": Family("llama", permute_rotary=True, yarn=True),
    "qwen2": Family("qwen2", yarn=True),
    "qwen3": Family("qwen3", yarn=True),
    "gemma2": Family("gemma2", norm_offset=1.0, tied_only=True),
    "gemma3_text": Family("gemma3", norm_offset=1.0),
    "phi3": Family("phi3"),
    "granite": Family("granite", permute_rotary=True),
    "qwen3_moe": Family("qwen3moe"),
    "olmo2": Family("olmo2"),
    "lfm2": Family("lfm2"),
    "granitemoehybrid": Family("granitehybrid", permute_rotary=True, key="GRANITE_HYBRID"),
    "gpt_oss": Family("gpt-oss", key="GPT_OSS", yarn=True),
    "ernie4_5": Family("ernie4_5"),
    "ernie4_5_moe": Family("ernie4_5-moe", key="ERNIE4_5_MOE"),
    "lfm2_moe": Family("lfm2moe", key="LFM2MOE"),
    # Reached by the name map and the common keys alone (tests/mlx_api/with_llama_cpp/test_gguf_generic_families_...).
    "gemma": Family("gemma", norm_offset=1.0, tied_only=True),
    "mixtral": Family("llama", permute_rotary=True),
    "seed_oss": Family("seed_oss"),
    "olmoe": Family("olmoe", output_required=True),
    "qwen2_moe": Family("qwen2moe"),
    "internlm3": Family("llama", permute_rotary=True),
    "hunyuan_v1_dense": Family("hunyuan-dense", key="HUNYUAN_DENSE"),
    "smollm3": Family("smollm3", permute_rotary=True),
    "starcoder2": Family("starcoder2"),
    "phi": Family("phi2"),
    "cohere": Family("command-r", key="COMMAND_R"),
    "glm4": Family("glm4"),
    "stablelm": Family("stablelm"),
    "ministral3": Family("mistral3", permute_rotary=True, yarn=True, yarn_log_mul=True),
    "glm4_moe": Family("glm4moe", key="GLM4_MOE"),
    "gemma4_text": Family("gemma4"),
    "gemma3n_text": Family("gemma3n"),  # AltUp, Laurel and per-layer inputs, written by `gemma3n`
    # Mamba 2 hybrids (mamba_hybrids): Nemotron-H with experts is written as nemotron_h_moe.
    "falcon_h1": Family("falcon-h1", key="FALCON_H1"),
    "nemotron_h": Family("nemotron_h"),
    "qwen3_5_text": Family("qwen35"),
    "qwen3_5_moe_text": Family("qwen35moe", key="QWEN35MOE"),
    # Latent attention, written by `latent_attention` (YaRN only as DeepSeek's log multiplier makes it agree).
    "glm4_moe_lite": Family("deepseek2", yarn=True, yarn_log_mul=True),
    "deepseek_v3": Family("deepseek2", yarn=True, yarn_log_mul=True),
    "deepseek_v2": Family("deepseek2", yarn=True, yarn_log_mul=True),
}
# Granite 4.0's all-attention models (no Mamba layer), as llama.cpp's converter writes them.
GRANITE_4_ATTENTION_ONLY = {
    False: FAMILIES["granite"],
    True: Family("granitemoe", permute_rotary=True, key="GRANITE_MOE"),
}
# Vision-language wrappers mlx_lm loads as their language model alone: that model's config key and weight prefix.
TEXT_WRAPPERS = {
    "mistral3": ("text_config", "language_model."),
    "gemma4": ("text_config", "language_model."),
    "qwen3_5": ("text_config", "language_model."),
    "qwen3_5_moe": ("text_config", "language_model."),
    "gemma3n": ("text_config", "model.language_model."),
}
# Wrappers whose language model's weights keep a prefix of their own once the wrapper's is removed.
_INNER_PREFIX = {"gemma3n": "model."}
# Wrappers whose outer vocab_size mlx_lm copies into the language model's config.
_OUTER_VOCAB = {"gemma4"}
# Wrappers mlx_lm also loads from a flat config, read as their language model's own type.
_FLAT_TEXT_TYPES = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}


def unwrap_text_model(config: Dict[str, Any], weights: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], Dict]:
    """The language model's own config and weights, for a wrapper in TEXT_WRAPPERS; anything else as it is."""
    wrapper = TEXT_WRAPPERS.get(str(config.get("model_type")))
    if wrapper is None:
        return config, dict(weights or {})
    key, prefix = wrapper
    if key not in config and config.get("model_type") in _FLAT_TEXT_TYPES:
        config = {**config, key: {**config, "model_type": _FLAT_TEXT_TYPES[str(config["model_type"])]}}
    inner = {"tie_word_embeddings": False, **config[key]}  # as mlx_lm builds it
    if config.get("model_type") in _OUTER_VOCAB and config.get("vocab_size"):
        inner["vocab_size"] = config["vocab_size"]
        inner["tie_word_embeddings"] = config[key].get("tie_word_embeddings", True)  # Gemma 4 ties by default
    inner_prefix = _INNER_PREFIX.get(str(config.get("model_type")), "")
    named = {
        inner_prefix + name.removeprefix(prefix) if name.startswith(prefix) else name: value
        for name, value in (weights or {}).items()
    }
    return inner, named


# Why YaRN is refused for a family llama.cpp would apply it to, where the reason is more than "not checked here".
YARN_REFUSALS = {
    "qwen3_moe": "mlx_lm's qwen3_moe builds a plain RoPE and ignores rope_scaling, so the model trained here never "
    "applied YaRN and llama.cpp would",
}
# Why a type llama.cpp loads is still refused, where more is known than "no converter here yet".
NOTES: Dict[str, str] = {
    "gemma3": "a vision-language config: export its language model saved as gemma3_text",
    "gemma4_unified": "its encoder-free vision layout is not read here: export the language model saved as gemma4_text",
}
