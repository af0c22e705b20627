# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The dense families llama.cpp reads with the common tensor names and keys, and the few keys, refusals or fused
projections each adds (Gemma's soft caps and sliding windows, Cohere's logit scale, HunYuan's NTK alpha, Mistral 3's
attention temperature, GLM's whole-head rotation, MiniCPM's three scales, InternLM2's and GPT-NeoX's fused
query/key/value rows), and MiniCPM 3's scales folded into its weights, OpenELM's per-layer heads, Apertus' xIELU keys,
Qwen 1's and PLaMo's layouts, PLaMo 3's norm offsets.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional

import numpy as np

from ..families import Family, UnsupportedModel
from .architectures import Piece, blk
from .base import Converter, head_dim, interleave_rotary_rows, rope_base, scaling_of


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


class MiniCPM(Converter):
    """MiniCPM: llama's layers with the embedding, each residual branch and the logits scaled, as llama.cpp's minicpm
    reads them from three keys."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("tie_word_embeddings"):
            raise UnsupportedModel(
                "minicpm with tie_word_embeddings=True: mlx_lm's tied head skips the hidden_size / dim_model_base "
                "logit division that llama.cpp's minicpm applies"
            )
        if config.get("head_dim") not in (None, head_dim({**config, "head_dim": None})):
            raise UnsupportedModel(
                "minicpm with a head_dim other than hidden_size / heads: mlx_lm's minicpm ignores it"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_embedding_scale(float(config["scale_emb"]))
        writer.add_residual_scale(float(config["scale_depth"]) / int(config["num_hidden_layers"]) ** 0.5)
        writer.add_logit_scale(int(config["hidden_size"]) / int(config["dim_model_base"]))


class InternLM2(Converter):
    """InternLM2: one `wqkv` holding, per key/value head, its group of query heads then its key and value heads; split
    into llama.cpp's attn_q / attn_k / attn_v with the query and key rows interleaved per head."""

    embedding_weight = "model.tok_embeddings.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("bias", True):  # mlx_lm's default, as InternLM2's remote code's
            raise UnsupportedModel("internlm2 with bias=True: llama.cpp's internlm2 reads no output-projection bias")
        if config.get("head_dim") not in (None, head_dim({**config, "head_dim": None})):
            raise UnsupportedModel("internlm2 with a head_dim other than hidden_size / heads: mlx_lm ignores it")

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if not name.endswith(".attention.wqkv.weight"):
            return super().split_weight(name, data, config)
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        grouped = data.reshape(kv_heads, heads // kv_heads + 2, head_dim(config), data.shape[-1])
        query = grouped[:, :-2].reshape(-1, data.shape[-1])
        key, value = (grouped[:, index].reshape(-1, data.shape[-1]) for index in (-2, -1))
        return [
            (blk(name, "attn_q.weight"), interleave_rotary_rows(query, heads), True),
            (blk(name, "attn_k.weight"), interleave_rotary_rows(key, kv_heads), True),
            (blk(name, "attn_v.weight"), value, True),
        ]


_NEOX_NAMES = {"model.embed_in.": "gpt_neox.embed_in.", "model.final_layer_norm.": "gpt_neox.final_layer_norm."}


class GPTNeoX(Converter):
    """GPT-NeoX (Pythia): LayerNorm with biases, a 4x GELU MLP, parallel residuals, and one query_key_value whose rows
    go head by head (query, key, value of head 0, then head 1...), regrouped into llama.cpp's all-queries-first order."""

    embedding_weight = "model.embed_in.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("num_key_value_heads") not in (None, config["num_attention_heads"]):
            raise UnsupportedModel("gpt_neox with fewer key/value heads than query heads: mlx_lm's gpt_neox has none")

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """mlx_lm's names (`model.h.N.`, `model.embed_out`) back to Hugging Face's, which the name map knows."""
        renamed = {}
        for name, value in weights.items():
            name = name.replace("model.h.", "gpt_neox.layers.").replace("model.embed_out.", "embed_out.")
            for mlx_prefix, hf_prefix in _NEOX_NAMES.items():
                name = name.replace(mlx_prefix, hf_prefix)
            renamed[name] = value
        return renamed

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if ".attention.query_key_value." not in name:
            return [(name, data, False)]
        heads = int(config["num_attention_heads"])
        by_head = data.reshape(heads, 3, -1, *data.shape[1:])
        return [(name, np.concatenate([by_head[:, part].reshape(-1, *data.shape[1:]) for part in range(3)]), False)]

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return float(config.get("rotary_emb_base") or 10000.0)

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return int(head_dim(config) * float(config["rotary_pct"]))

    def feed_forward_length(self, config: Dict[str, Any]) -> int:
        return 4 * int(config["hidden_size"])  # mlx_lm's MLP, whatever intermediate_size says

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_parallel_residual(bool(config.get("use_parallel_residual", True)))


class Nemotron(Converter):
    """Nemotron (Minitron): LayerNorm scaling by 1 + weight (the family's norm offset), a squared-ReLU MLP, half of each
    head rotated by default."""

    def refuse(self, config: Dict[str, Any]) -> None:
        heads, width = int(config["num_attention_heads"]), int(config["hidden_size"])
        if head_dim(config) * heads != width:
            raise UnsupportedModel(
                f"nemotron with head_dim {head_dim(config)} x {heads} heads != hidden_size {width}: llama.cpp's "
                "nemotron sizes its attention by hidden_size alone"
            )

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        return int(head_dim(config) * float(config.get("partial_rotary_factor") or 0.5))  # mlx_lm's default

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_layer_norm_eps(float(config["norm_eps"]))


class Exaone(Converter):
    """EXAONE 3 and 3.5: llama's layers under GPT-2's names (`transformer.h.N`), counted by `num_layers`."""

    embedding_weight = "transformer.wte.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        for key in ("attention_bias", "mlp_bias"):
            if config.get(key):
                raise UnsupportedModel(f"exaone with {key}=True: llama.cpp's exaone reads no such biases")

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {**config, "num_hidden_layers": int(config.get("num_hidden_layers") or config["num_layers"])}

    def rms_norm_eps(self, config: Dict[str, Any]) -> float:
        return float(config["layer_norm_epsilon"])


class GPTBigCode(Converter):
    """StarCoder 1 / SantaCoder (gpt_bigcode) as llama.cpp's starcoder: GPT-2's names and keys, learned positions, one
    fused query/key/value (multi-query: one key/value head) kept whole, LayerNorm and biases throughout."""

    embedding_weight = "transformer.wte.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        for key in ("attention_bias", "mlp_bias"):
            if not config.get(key, True):
                raise UnsupportedModel(f"gpt_bigcode with {key}=False: llama.cpp's starcoder requires the biases")

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        width, heads = int(config["n_embd"]), int(config["n_head"])
        return {
            **config,
            "hidden_size": width,
            "num_hidden_layers": int(config["n_layer"]),
            "num_attention_heads": heads,
            "num_key_value_heads": 1 if config.get("multi_query", True) else heads,  # as mlx_lm reads it
            "intermediate_size": int(config.get("n_inner") or 4 * width),
            "max_position_embeddings": int(config["n_positions"]),  # the rows of the position table
        }


class GPT2(GPTBigCode):
    """GPT-2: StarCoder's layout with every head its own key/value head, a 4x MLP and a tied head; mlx_lm keeps its
    weights under `model.` where the name map knows `transformer.`."""

    embedding_weight = "model.wte.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        """mlx_lm's gpt2 always has its biases."""

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        common = super().with_common_keys(config)
        width = int(config["n_embd"])
        return {**common, "num_key_value_heads": common["num_attention_heads"], "intermediate_size": 4 * width}

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {"transformer." + name.removeprefix("model."): value for name, value in weights.items()}


class Xverse(Converter):
    """XVERSE, which mlx_lm runs as llama: llama.cpp's xverse reads llama's layers without biases or rope scaling."""

    def refuse(self, config: Dict[str, Any]) -> None:
        for key in ("attention_bias", "mlp_bias"):
            if config.get(key):
                raise UnsupportedModel(f"xverse with {key}=True: llama.cpp's xverse reads no such biases")
        if scaling_of(config):
            raise UnsupportedModel("xverse with rope_scaling: llama.cpp's xverse graph is not checked against it here")
        if config.get("head_dim") not in (None, head_dim({**config, "head_dim": None})):
            raise UnsupportedModel(
                "xverse with a head_dim other than hidden_size / heads: llama.cpp's xverse sizes by it"
            )


# What llama.cpp's minicpm3 graph fixes where mlx_lm reads the config: the embedding scale, the residual scale's
# numerator and the width the logits are divided against; the weights are rescaled to make up the difference.
_MINICPM3_FIXED = {"scale_emb": 12.0, "scale_depth": 1.4, "dim_model_base": 256}


class MiniCPM3(Converter):
    """MiniCPM 3: latent attention with its key/value expansion whole (llama.cpp's attn_kv_b), MiniCPM's three scales
    folded into the embedding, residual and output matrices, and the rope's long factors (which mlx_lm's
    SuScaledRoPE always applies) written for both of llama.cpp's context lengths, with its attention scale."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("attention_bias"):
            raise UnsupportedModel("minicpm3 with attention_bias=True: llama.cpp's minicpm3 reads no biases")
        if float(config["rms_norm_eps"]) != 1e-5:
            raise UnsupportedModel(
                f"minicpm3 with rms_norm_eps {config['rms_norm_eps']!r}: mlx_lm norms its query and latent with "
                "1e-5 whatever the config says, llama.cpp with the config's epsilon"
            )
        if not isinstance(config.get("rope_scaling"), dict):
            raise UnsupportedModel("minicpm3 without rope_scaling: mlx_lm's minicpm3 requires it")

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        depth = np.float32(float(config["scale_depth"]) / _MINICPM3_FIXED["scale_depth"])
        embedding = weights["model.embed_tokens.weight"]
        if config.get("tie_word_embeddings"):  # mlx_lm's tied head skips the division by hidden / dim_model_base
            head = embedding * np.float32(int(config["hidden_size"]) / _MINICPM3_FIXED["dim_model_base"])
        else:
            head = weights["lm_head.weight"] * np.float32(
                int(config["dim_model_base"]) / _MINICPM3_FIXED["dim_model_base"]
            )
        prepared = {name: value for name, value in weights.items() if name != "lm_head.weight"}
        prepared["model.embed_tokens.weight"] = embedding * np.float32(float(config["scale_emb"]) / 12.0)
        for name, value in weights.items():
            if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                prepared[name] = value * depth
        prepared["output.weight"] = head
        return prepared

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return [(name, data, name == "output.weight")]

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # written by write_hyperparameters and rope_tensors

    def rope_tensors(self, config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        rotated = int(config["qk_rope_head_dim"])
        long = np.broadcast_to(np.asarray(config["rope_scaling"].get("long_factor", 1.0), np.float32), (rotated // 2,))
        return {"rope_factors_long.weight": long.copy(), "rope_factors_short.weight": long.copy()}

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        rotated, heads, width = (
            int(config["qk_rope_head_dim"]),
            int(config["num_attention_heads"]),
            int(config["hidden_size"]),
        )
        writer.add_context_length(int(config["max_position_embeddings"]))
        writer.add_embedding_length(width)
        writer.add_block_count(int(config["num_hidden_layers"]))
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_head_count(heads)
        writer.add_head_count_kv(int(config["num_key_value_heads"]))
        writer.add_key_length(int(config["qk_nope_head_dim"]) + rotated)
        writer.add_value_length(width // heads)  # mlx_lm's value heads, whatever v_head_dim says
        writer.add_rope_dimension_count(rotated)
        writer.add_rope_freq_base(float(config.get("rope_theta") or 1000000.0))  # mlx_lm's default
        writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
        writer.add_q_lora_rank(int(config["q_lora_rank"]))
        writer.add_kv_lora_rank(int(config["kv_lora_rank"]))
        writer.add_rope_scaling_attn_factors(_su_scale(config))


def _su_scale(config: Dict[str, Any]) -> float:
    """The factor mlx_lm's SuScaledRoPE multiplies the rotated part by, from the context it was extended to."""
    original = int(config["rope_scaling"].get("original_max_position_embeddings", 4096))
    factor = int(config["max_position_embeddings"]) / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


_OPENELM_FFN = re.compile(r"^transformer\.layers\.(\d+)\.ffn\.proj_1\.weight$")


class OpenELM(Converter):
    """OpenELM: head counts and MLP widths that change from layer to layer, one fused query/key/value with per-head
    query and key norms, one proj_1 holding the gate rows then the up rows, and the embedding as its head."""

    embedding_weight = "transformer.token_embeddings.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        if not config.get("share_input_output_layers", True):
            raise UnsupportedModel(
                "openelm with share_input_output_layers=False: llama.cpp's openelm always uses the embedding as its head"
            )
        if not config.get("normalize_qk_projections", True):
            raise UnsupportedModel("openelm with normalize_qk_projections=False: llama.cpp's openelm always norms them")

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return {
            **config,
            "hidden_size": int(config["model_dim"]),
            "num_hidden_layers": int(config["num_transformer_layers"]),
            "num_attention_heads": int(
                config["num_query_heads"][0]
            ),  # the first layer's, as llama.cpp's quantizer reads
            "num_key_value_heads": int(config["num_kv_heads"][0]),
        }

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        match = _OPENELM_FFN.match(name)
        if match is None:
            return super().split_weight(name, data, config)
        gate, up = np.split(data, 2, axis=0)
        return [
            (f"blk.{match.group(1)}.ffn_gate.weight", gate, True),
            (f"blk.{match.group(1)}.ffn_up.weight", up, True),
        ]

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        from mlx_lm.models.openelm import make_divisible

        width, dims = int(config["model_dim"]), int(config["head_dim"])
        divisor = int(config["ffn_dim_divisor"])
        writer.add_context_length(int(config.get("max_context_length") or 2048))
        writer.add_embedding_length(width)
        writer.add_block_count(int(config["num_transformer_layers"]))
        writer.add_feed_forward_length(
            [int(make_divisible(m * width, divisor=divisor)) for m in config["ffn_multipliers"]]
        )
        writer.add_head_count([int(count) for count in config["num_query_heads"]])
        writer.add_head_count_kv([int(count) for count in config["num_kv_heads"]])
        writer.add_key_length(dims)
        writer.add_value_length(dims)
        writer.add_rope_dimension_count(dims)
        writer.add_rope_freq_base(float(config.get("rope_freq_constant") or 10000.0))
        writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps") or 1e-6))


# Apertus' xIELU activation: mlx_lm holds its four settings as per-layer weights, llama.cpp reads them as keys.
_XIELU = ("alpha_n", "alpha_p", "beta", "eps")


class Apertus(Converter):
    """Apertus: llama's attention with per-head query and key norms, an up/down MLP through xIELU, whose per-layer
    settings llama.cpp reads from keys."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("mlp_bias"):
            raise UnsupportedModel("apertus with mlp_bias=True: llama.cpp's apertus reads no MLP biases")
        if config.get("head_dim") not in (None, head_dim({**config, "head_dim": None})):
            raise UnsupportedModel("apertus with a head_dim other than hidden_size / heads: mlx_lm ignores it")

    def with_weight_settings(self, config: Dict[str, Any], weights: Dict[str, np.ndarray]) -> Dict[str, Any]:
        layers = range(int(config["num_hidden_layers"]))
        settings = {
            f"xielu_{part}": [
                float(np.asarray(weights[f"model.layers.{i}.mlp.act_fn.{part}"]).reshape(-1)[0]) for i in layers
            ]
            for part in _XIELU
        }
        return {**config, **settings}

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        return [] if ".mlp.act_fn." in name else super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        for part in _XIELU:
            getattr(writer, f"add_xielu_{part}")(config[f"xielu_{part}"])


class Qwen(Converter):
    """Qwen (1): one fused query/key/value with biases, w2 the gate and w1 the up half of an MLP intermediate_size / 2
    wide, under GPT-2's names; mlx_lm rotates whole heads with base 10000 whatever the config says."""

    embedding_weight = "transformer.wte.weight"

    def refuse(self, config: Dict[str, Any]) -> None:
        if not config.get("no_bias", True):
            raise UnsupportedModel("qwen with no_bias=False: llama.cpp's qwen reads no output or MLP biases")
        heads, width = int(config["num_attention_heads"]), int(config["hidden_size"])
        if int(config.get("kv_channels") or 128) * heads != width:
            raise UnsupportedModel(
                "qwen with kv_channels x heads != hidden_size: llama.cpp's qwen sizes by hidden_size"
            )

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return 10000.0  # nn.RoPE's default, which mlx_lm's qwen never changes

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # mlx_lm's qwen reads none

    def rms_norm_eps(self, config: Dict[str, Any]) -> float:
        return float(config.get("layer_norm_epsilon") or 1e-6)


class Plamo(Converter):
    """PLaMo (1): attention and MLP side by side after one norm, each query head i reading key/value head
    i % kv_heads (mlx_lm tiles them); its query rows and output columns are regrouped so that llama.cpp's
    i // group reads the same head, as llama.cpp's converter does."""

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        shared = int(config.get("n_shared_head") or 8)
        return {**config, "num_key_value_heads": -(-int(config["num_attention_heads"]) // shared)}

    def refuse(self, config: Dict[str, Any]) -> None:
        heads, shared = int(config["num_attention_heads"]), int(config.get("n_shared_head") or 8)
        if heads % shared:
            raise UnsupportedModel(f"plamo with {heads} heads not a multiple of n_shared_head {shared}")
        if config.get("rope_traditional"):
            raise UnsupportedModel("plamo with rope_traditional=True: llama.cpp's plamo rotates halves")

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        shared, kv_heads = int(config.get("n_shared_head") or 8), int(config["num_key_value_heads"])
        if name.endswith("self_attn.q_proj.weight"):
            data = data.reshape(shared, kv_heads, -1, data.shape[-1]).swapaxes(0, 1).reshape(data.shape)
        elif name.endswith("self_attn.o_proj.weight"):
            data = data.reshape(data.shape[0], shared, kv_heads, -1).swapaxes(1, 2).reshape(data.shape)
        return [(name, data, False)]


# PLaMo 3's norms scale by weight + offset, each its own offset; llama.cpp's by the stored weight.
_PLAMO3_OFFSETS = {
    ".pre_mixer_norm.weight": 1.0,
    ".post_mixer_norm.weight": 1.0 / 5,
    ".pre_mlp_norm.weight": 1.0,
    ".post_mlp_norm.weight": 1.0 / 5**1.5,
    ".mixer.q_norm.weight": 1.0,
    ".mixer.k_norm.weight": 1.0,
    "model.norm.weight": 1.0,
}


class Plamo3(Converter):
    """PLaMo 3: norms before and after attention and MLP with their own offsets, per-head query/key norms, sliding
    layers (all but every `sliding_window_pattern`-th) with their own rope base, one fused gate/up projection."""

    def refuse(self, config: Dict[str, Any]) -> None:
        if _plamo3_args(config).linear_type != "normal":
            raise UnsupportedModel("plamo3 with linear_type other than normal: llama.cpp's plamo3 reads plain matrices")

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        prepared = dict(weights)
        for name, value in weights.items():
            offset = next((shift for suffix, shift in _PLAMO3_OFFSETS.items() if name.endswith(suffix)), 0.0)
            prepared[name] = value + np.float32(offset)
        return prepared

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        args = _plamo3_args(config)
        return float(args.rope_local_theta if local else args.rope_theta)

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return None  # mlx_lm's plamo3 reads none

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        args = _plamo3_args(config)
        pattern = int(args.sliding_window_pattern)
        writer.add_sliding_window(int(args.window_size) + 1)  # mlx_lm's window holds window_size + 1 positions
        writer.add_sliding_window_pattern([(layer + 1) % pattern != 0 for layer in range(int(args.num_hidden_layers))])
        writer.add_rope_freq_base_swa(self.rope_base(config, local=True))


def _plamo3_args(config: Dict[str, Any]) -> Any:
    from mlx_lm.models.plamo3 import ModelArgs

    return ModelArgs.from_dict(config)


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
    "minicpm": MiniCPM(Family("minicpm", permute_rotary=True)),
    "internlm2": InternLM2(Family("internlm2", output_required=True)),
    "gpt_neox": GPTNeoX(Family("gptneox", output_required=True)),
    "iquestcoder": Converter(Family("llama", permute_rotary=True, yarn=True)),  # mlx_lm runs it as llama
    "nemotron": Nemotron(Family("nemotron", norm_offset=1.0, output_required=True)),
    "exaone": Exaone(Family("exaone")),
    "gpt_bigcode": GPTBigCode(Family("starcoder")),
    "gpt2": GPT2(Family("gpt2")),
    "xverse": Xverse(Family("xverse", permute_rotary=True, output_required=True)),
    "ministral3": Ministral3(Family("mistral3", permute_rotary=True, yarn=True, yarn_log_mul=True)),
    "minicpm3": MiniCPM3(Family("minicpm3")),
    "openelm": OpenELM(Family("openelm")),
    "apertus": Apertus(Family("apertus", output_required=True)),
    "qwen": Qwen(Family("qwen")),
    "plamo": Plamo(Family("plamo")),
    "plamo3": Plamo3(Family("plamo3")),
}
