# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The dense families llama.cpp reads with the common tensor names and keys, and the few keys or refusals each adds
(Gemma's soft caps and sliding windows, Cohere's logit scale, HunYuan's NTK alpha, Mistral 3's attention temperature,
GLM's whole-head rotation).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..families import Family, UnsupportedModel
from .base import Converter, head_dim, rope_base, scaling_of


class Gemma2(Converter):
    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_float32("gemma2.attn_logit_softcapping", float(config.get("attn_logit_softcapping") or 50.0))
        writer.add_float32("gemma2.final_logit_softcapping", float(config.get("final_logit_softcapping") or 30.0))
        writer.add_sliding_window(int(config.get("sliding_window") or 4096))


class Gemma3(Converter):
    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_sliding_window(int(config.get("sliding_window") or 512))
        writer.add_sliding_window_pattern(_sliding_layers(config))
        writer.add_rope_freq_base_swa(self.rope_base(config, local=True))
        if config.get("final_logit_softcapping"):
            writer.add_float32(
                f"{family.architecture}.final_logit_softcapping", float(config["final_logit_softcapping"])
            )


def _sliding_layers(config: Dict[str, Any]) -> List[bool]:
    """Gemma 3's local layers: all but every `sliding_window_pattern`-th."""
    pattern = int(config.get("sliding_window_pattern") or 6)
    return [(layer + 1) % pattern != 0 for layer in range(int(config["num_hidden_layers"]))]


class Olmo3(Converter):
    """OLMo 3: OLMo 2's layers with sliding-window attention in all but every 4th, as llama.cpp's olmo2 reads it."""

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        layers = int(config["num_hidden_layers"])
        kinds = config.get("layer_types") or [  # mlx_lm's default when the config names none
            "full_attention" if (layer + 1) % 4 == 0 else "sliding_attention" for layer in range(layers)
        ]
        writer.add_sliding_window(int(config["sliding_window"]))
        writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in kinds])


class Cohere2(Converter):
    """Command R7B: sliding-window layers with rotary embeddings, every `sliding_window_pattern`-th global without."""

    def refuse(self, config: Dict[str, Any]) -> None:
        for key in ("layer_norm_bias", "attention_bias"):
            if config.get(key):
                raise UnsupportedModel(f"cohere2 with {key}=True: llama.cpp's cohere2 reads no such biases")

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        pattern = int(config.get("sliding_window_pattern") or 4)
        writer.add_sliding_window(int(config.get("sliding_window") or 4096))
        writer.add_sliding_window_pattern(
            [(layer + 1) % pattern != 0 for layer in range(int(config["num_hidden_layers"]))]
        )
        writer.add_logit_scale(float(config.get("logit_scale") or 0.0625))
        if not config.get("layer_norm_eps"):  # llama.cpp requires it; mlx_lm's default
            writer.add_layer_norm_eps(1e-5)


class Exaone4(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("sliding_window_pattern"):
            raise UnsupportedModel(
                "exaone4 with sliding-window layers: llama.cpp's exaone4 reads its sliding pattern only at 64 layers "
                "(the 32B), which is not checked here"
            )


class HunyuanDense(Converter):
    """HunYuan's NTK alpha is a larger rotary base, not a scaling llama.cpp applies, as mlx_lm folds it."""

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        base = rope_base(config, local)
        alpha = (config.get("rope_scaling") or {}).get("alpha")
        if local or not alpha:
            return base
        dims = head_dim(config)
        return base * float(alpha) ** (dims / (dims - 2))

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        if "alpha" in (scaling_of(config) or {}):
            return None
        return super().rope_scaling(config)


class Cohere(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("use_qk_norm"):
            raise UnsupportedModel(
                "cohere with use_qk_norm=True: its per-head norms are not checked against llama.cpp here"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_logit_scale(float(config.get("logit_scale") or 0.0625))  # Cohere scales its logits


class SmolLM3(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        layers = int(config["num_hidden_layers"])
        interval = int(config.get("no_rope_layer_interval") or 4)
        rotary = config.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        if list(rotary) != [int((i + 1) % 4 != 0) for i in range(layers)]:
            raise UnsupportedModel(
                "smollm3 with rotary embeddings off in layers other than every 4th: llama.cpp fixes that"
            )


class Glm(Converter):
    """GLM-4 (glm-4-9b-chat-hf) as llama.cpp's chatglm: the fused gate and up rows kept whole as its ffn_up, and the
    whole of each head rotated in adjacent pairs with no scaling, as mlx_lm's glm runs it (partial_rotary_factor and
    rope_scaling are not read there)."""

    def refuse(self, config: Dict[str, Any]) -> None:
        heads, width = int(config["num_attention_heads"]), int(config["hidden_size"])
        if head_dim(config) * heads != width:
            raise UnsupportedModel(
                f"glm with head_dim {head_dim(config)} x {heads} heads != hidden_size {width}: llama.cpp's chatglm "
                "sizes its output projection by hidden_size alone"
            )

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return head_dim(config)

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None


class Ministral3(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if "sliding_attention" in (config.get("layer_types") or []):
            raise UnsupportedModel(
                "ministral3 with sliding-window layers: llama.cpp's mistral3 attends to every position"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        beta = (self.rope_scaling(config) or {}).get("llama_4_scaling_beta")
        if beta:  # Llama 4's attention temperature, growing with each multiple of the original context
            writer.add_attn_temperature_scale(float(beta))


CONVERTERS = {
    "llama": Converter(Family("llama", permute_rotary=True, yarn=True)),
    "mistral": Converter(Family("llama", permute_rotary=True, yarn=True)),
    "qwen2": Converter(Family("qwen2", yarn=True)),
    "qwen3": Converter(Family("qwen3", yarn=True)),
    "gemma2": Gemma2(Family("gemma2", norm_offset=1.0, tied_only=True)),
    "gemma3_text": Gemma3(Family("gemma3", norm_offset=1.0)),
    "phi3": Converter(Family("phi3")),
    "olmo2": Converter(Family("olmo2")),
    "olmo3": Olmo3(Family("olmo2")),
    "exaone4": Exaone4(Family("exaone4")),
    "cohere2": Cohere2(Family("cohere2", tied_only=True)),
    # Reached by the name map and the common keys alone (tests/mlx_api/with_llama_cpp/test_gguf_generic_families_...).
    "gemma": Converter(Family("gemma", norm_offset=1.0, tied_only=True)),
    "mixtral": Converter(Family("llama", permute_rotary=True)),
    "seed_oss": Converter(Family("seed_oss")),
    "internlm3": Converter(Family("llama", permute_rotary=True)),
    "hunyuan_v1_dense": HunyuanDense(Family("hunyuan-dense", key="HUNYUAN_DENSE")),
    "smollm3": SmolLM3(Family("smollm3", permute_rotary=True)),
    "starcoder2": Converter(Family("starcoder2")),
    "phi": Converter(Family("phi2")),
    "cohere": Cohere(Family("command-r", key="COMMAND_R")),
    "glm4": Converter(Family("glm4")),
    "glm": Glm(Family("chatglm")),
    "stablelm": Converter(Family("stablelm")),
    "ministral3": Ministral3(Family("mistral3", permute_rotary=True, yarn=True, yarn_log_mul=True)),
}
