# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Hugging Face weights and config to GGUF tensors and metadata, for the families the notebooks train.

Names come from the `gguf` package's per-architecture maps (`gguf.TensorNameMap`), which hold llama.cpp's names;
what each family needs beyond renaming (llama's rotary row order, Gemma's `1 + weight` norms, Llama 3's rope
frequency factors) is written here, the hybrid and expert families' reshapes and keys in `architectures`, and
`write_gguf` stores the tensors in one llama.cpp type with `GGUFWriter`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from .coverage import verdict
from .families import FAMILIES, GRANITE_4_ATTENTION_ONLY, YARN_REFUSALS, Family
from .converters import gemma3n, gemma4, latent_attention, mamba_hybrids, qwen35
from .converters.architectures import feed_forward_length, has_experts, kv_head_counts, split_weight, write_family_keys
from .tokenizer import TokenizerKeys


# The rope scalings each family's llama.cpp graph reproduces from the keys written here.
_ROPE_TYPES = {"default", "linear", "llama3"}


class UnsupportedModel(NotImplementedError):
    """The model's architecture or one of its settings has no GGUF form here."""


def family_for(config: Dict[str, Any]) -> Family:
    model_type = str(config.get("model_type"))
    if model_type not in FAMILIES:
        reason = verdict(model_type, config.get("architectures") or ()).reason
        raise UnsupportedModel(
            f"GGUF export on MLX cannot write model_type {model_type!r}: {reason} (docs/gguf.md lists every type; "
            f"exported: {', '.join(FAMILIES)})"
        )
    _refuse_unsupported_settings(config)
    if model_type == "granitemoehybrid" and "mamba" not in config.get("layer_types", ["mamba"]):
        return GRANITE_4_ATTENTION_ONLY[has_experts(config)]
    if model_type in mamba_hybrids.MODEL_TYPES:
        return mamba_hybrids.family_for(config, FAMILIES[model_type])
    return FAMILIES[str(model_type)]


def _refuse_unsupported_settings(config: Dict[str, Any]) -> None:
    """Settings of a supported family that llama.cpp's graph for it does not reproduce, named before any work."""
    model_type = config.get("model_type")
    if model_type == "qwen3_moe":
        if config.get("norm_topk_prob") is False:
            raise UnsupportedModel("qwen3_moe with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if config.get("mlp_only_layers") or int(config.get("decoder_sparse_step") or 1) != 1:
            raise UnsupportedModel("qwen3_moe with dense layers (mlp_only_layers, decoder_sparse_step): not in GGUF")
    attention_only = "mamba" not in config.get("layer_types", ["mamba"])
    if model_type == "granitemoehybrid" and attention_only and has_experts(config):
        if config.get("position_embedding_type") == "nope":
            raise UnsupportedModel(
                "granitemoehybrid with experts, no Mamba layer and position_embedding_type='nope': "
                "llama.cpp's granitemoe always applies rotary embeddings"
            )
    if model_type in ("ernie4_5", "ernie4_5_moe") and config.get("use_bias"):
        raise UnsupportedModel(f"{model_type} with use_bias=True: not checked against llama.cpp's ERNIE 4.5 here")
    if model_type == "ernie4_5_moe":
        if config.get("moe_gate_act", "softmax") != "softmax":
            raise UnsupportedModel("ernie4_5_moe with moe_gate_act other than softmax: llama.cpp's routes by softmax")
        last = int(config["num_hidden_layers"]) - 1
        if config.get("moe_layer_end_index") is not None and config["moe_layer_end_index"] < last:
            raise UnsupportedModel("ernie4_5_moe with dense trailing layers (moe_layer_end_index): not in GGUF")
    if model_type in ("olmoe", "qwen2_moe") and config.get("norm_topk_prob"):
        raise UnsupportedModel(f"{model_type} with norm_topk_prob=True: llama.cpp's graph never renormalizes the top-k")
    heads = config.get("num_attention_heads")
    if model_type == "olmoe" and config.get("num_key_value_heads") not in (None, heads):
        raise UnsupportedModel("olmoe with fewer key/value heads than query heads: llama.cpp's OLMoE has no GQA")
    if model_type == "cohere" and config.get("use_qk_norm"):
        raise UnsupportedModel(
            "cohere with use_qk_norm=True: its per-head norms are not checked against llama.cpp here"
        )
    if model_type == "smollm3":
        layers = int(config["num_hidden_layers"])
        interval = int(config.get("no_rope_layer_interval") or 4)
        rotary = config.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        if list(rotary) != [int((i + 1) % 4 != 0) for i in range(layers)]:
            raise UnsupportedModel(
                "smollm3 with rotary embeddings off in layers other than every 4th: llama.cpp fixes that"
            )
    if model_type == "ministral3" and "sliding_attention" in (config.get("layer_types") or []):
        raise UnsupportedModel("ministral3 with sliding-window layers: llama.cpp's mistral3 attends to every position")
    if model_type == "glm4_moe":
        _refuse_glm4_moe_settings(config)
    if model_type == "gemma4_text":
        try:
            gemma4.refuse_unsupported(config)
        except gemma4.Gemma4Unsupported as error:
            raise UnsupportedModel(str(error)) from None
    if model_type == "gemma3n_text":
        try:
            gemma3n.refuse_unsupported(config)
        except gemma3n.Gemma3nUnsupported as error:
            raise UnsupportedModel(str(error)) from None
    if model_type in mamba_hybrids.MODEL_TYPES:
        try:
            mamba_hybrids.refuse_unsupported(config)
        except mamba_hybrids.MambaHybridUnsupported as error:
            raise UnsupportedModel(str(error)) from None
    if model_type in ("qwen3_5_text", "qwen3_5_moe_text"):
        try:
            qwen35.refuse_unsupported(config)
        except qwen35.Qwen35Unsupported as error:
            raise UnsupportedModel(str(error)) from None
    if model_type in latent_attention.LATENT_TYPES:
        try:
            latent_attention.refuse_unsupported(config)
        except latent_attention.LatentAttentionUnsupported as error:
            raise UnsupportedModel(str(error)) from None
    if model_type in ("lfm2", "lfm2_moe") and config.get("conv_bias"):
        raise UnsupportedModel(f"{model_type} with conv_bias=True: llama.cpp's LFM2 has no convolution biases")
    if model_type == "lfm2_moe":
        if config.get("norm_topk_prob") is False:
            raise UnsupportedModel("lfm2_moe with norm_topk_prob=False: llama.cpp always renormalizes the top-k")
        if float(config.get("routed_scaling_factor") or 1.0) != 1.0:
            raise UnsupportedModel(
                "lfm2_moe with routed_scaling_factor other than 1: llama.cpp's LFM2 MoE reads no scale"
            )


def _refuse_glm4_moe_settings(config: Dict[str, Any]) -> None:
    """GLM-4.5 routing settings llama.cpp's glm4moe graph does not reproduce."""
    if config.get("scoring_func", "sigmoid") != "sigmoid":
        raise UnsupportedModel("glm4_moe with scoring_func other than sigmoid: llama.cpp's glm4moe routes by sigmoid")
    if int(config.get("n_group") or 1) > 1 and int(config.get("topk_group") or 1) < int(config["n_group"]):
        raise UnsupportedModel(
            "glm4_moe choosing experts within topk_group of n_group groups: llama.cpp's glm4moe reads no groups"
        )


def head_dim(config: Dict[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def _rope_parameters(config: Dict[str, Any], layer_type: str = "full_attention") -> Dict[str, Any]:
    """transformers 5 keeps rope settings in `rope_parameters`, per layer type where local layers differ."""
    parameters = config.get("rope_parameters")
    if not isinstance(parameters, dict):
        return {}
    return parameters.get(layer_type) or parameters


def rope_base(config: Dict[str, Any], local: bool = False) -> float:
    """The rotary base of the global layers, or with `local=True` of Gemma 3's local ones."""
    if local:
        parameters = config.get("rope_parameters")
        sliding = parameters.get("sliding_attention") if isinstance(parameters, dict) else None
        value = config.get("rope_local_base_freq") or (sliding or {}).get("rope_theta")
        return float(value or 10000.0)
    base = float(config.get("rope_theta") or _rope_parameters(config).get("rope_theta") or 10000.0)
    alpha = (config.get("rope_scaling") or {}).get("alpha")
    if config.get("model_type") == "hunyuan_v1_dense" and alpha:
        dims = head_dim(config)
        return base * float(alpha) ** (dims / (dims - 2))  # HunYuan's NTK alpha folded into the base, as mlx_lm does
    return base


def rope_scaling(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    scaling = config.get("rope_scaling") or _rope_parameters(config) or None
    if scaling is None:
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if config.get("model_type") == "hunyuan_v1_dense" and "alpha" in scaling:
        return None  # its alpha is a different base (rope_base), not a scaling llama.cpp applies
    family = FAMILIES.get(str(config.get("model_type")))
    if kind not in _ROPE_TYPES and not (kind == "yarn" and family is not None and family.yarn):
        yarn = ", ".join(name for name, known in FAMILIES.items() if known.yarn)
        why = YARN_REFUSALS.get(str(config.get("model_type")), f"known: llama3, linear; yarn for {yarn}")
        raise UnsupportedModel(f"rope_scaling of type {kind!r} cannot be written to GGUF here ({why})")
    if kind == "yarn":
        _refuse_yarn_settings_read_apart(scaling, family)
    return None if kind == "default" else {**scaling, "rope_type": kind}


# YaRN settings mlx_lm's YarnRoPE and llama.cpp's graph read differently, with the value each takes by default.
# (llama.cpp recomputes the attention factor from the scaling factor whatever the file says, as mlx_lm does.)
_YARN_READ_APART = {"extrapolation_factor": 1.0, "mscale": 1.0}


def _refuse_yarn_settings_read_apart(scaling: Dict[str, Any], family: Optional[Family]) -> None:
    for key, default in _YARN_READ_APART.items():
        if scaling.get(key) is not None and scaling[key] != default:
            raise UnsupportedModel(
                f"YaRN rope_scaling with {key}={scaling[key]!r}: mlx_lm's YaRN and llama.cpp's do not apply it alike"
            )
    if scaling.get("mscale_all_dim") and not (family is not None and family.yarn_log_mul):
        raise UnsupportedModel(
            f"YaRN rope_scaling with mscale_all_dim={scaling['mscale_all_dim']!r}: llama.cpp reads it only for "
            "DeepSeek's and Mistral 3's architectures"
        )


def llama3_rope_factors(config: Dict[str, Any], scaling: Dict[str, Any]) -> np.ndarray:
    """Llama 3.1's per-frequency divisors: long wavelengths slowed by `factor`, short kept, a smooth band between."""
    dims = head_dim(config)
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    context = float(scaling.get("original_max_position_embeddings", 8192))
    factors = []
    for index in range(0, dims, 2):
        wavelength = 2 * math.pi * rope_base(config) ** (index / dims)
        if wavelength < context / high:
            factors.append(1.0)
        elif wavelength > context / low:
            factors.append(factor)
        else:
            blend = (context / wavelength - low) / (high - low)
            factors.append(1.0 / ((1.0 - blend) / factor + blend))
    return np.array(factors, dtype=np.float32)


def interleave_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Reorder each head's rows from halves (Hugging Face) to interleaved pairs (llama.cpp's llama)."""
    rows = weight.shape[0]
    split = weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def gguf_tensors(weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """Every weight under its llama.cpp name, in llama.cpp's layout, as float32; an unmapped weight is an error."""
    import gguf

    family = family_for(config)
    names = gguf.TensorNameMap(family.arch, int(config["num_hidden_layers"]))
    heads, kv_heads = int(config["num_attention_heads"]), int(config.get("num_key_value_heads") or 0)
    tensors: Dict[str, np.ndarray] = {}
    if family.architecture == "gemma3n":  # AltUp's projections stacked, its coefficients clipped
        weights = gemma3n.prepare_weights(weights, config)
    split = qwen35.split_weight if family.architecture in qwen35.ARCHITECTURES else split_weight
    pieces = (
        piece
        for name, value in weights.items()
        if not (family.tied_only and name == "lm_head.weight")
        for piece in split(name, np.asarray(value, dtype=np.float32), config)
    )
    for name, data, named in pieces:
        target = name if named else names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise UnsupportedModel(f"no llama.cpp {family.architecture} tensor for the weight {name!r}")
        if family.permute_rotary and name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            data = interleave_rotary_rows(data, heads)
        elif family.permute_rotary and name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            data = interleave_rotary_rows(data, kv_heads or heads)
        if family.norm_offset and name.endswith("norm.weight"):
            data = data + np.float32(family.norm_offset)
        tensors[target] = data
    if family.output_required and "output.weight" not in tensors:
        tensors["output.weight"] = tensors["token_embd.weight"].copy()
    if family.architecture == "gemma4":
        tensors["rope_freqs.weight"] = gemma4.rope_frequency_factors(config)
        return tensors
    if family.architecture == "deepseek2":  # its YaRN is checked and written by latent_attention
        return tensors
    if family.architecture == "gemma3n":  # mlx_lm's gemma3n rotates plainly, whatever rope_scaling says
        return tensors
    scaling = rope_scaling(config)
    if scaling is not None and scaling["rope_type"] == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(config, scaling)
    return tensors


def _rms_norm_eps(config: Dict[str, Any]) -> float:
    if config.get("model_type") in mamba_hybrids.MODEL_TYPES:
        return mamba_hybrids.rms_norm_eps(config)
    return float(config.get("rms_norm_eps") or config.get("norm_eps") or 1e-6)


def _sliding_layers(config: Dict[str, Any]) -> List[bool]:
    """Gemma 3's local layers: all but every `sliding_window_pattern`-th."""
    pattern = int(config.get("sliding_window_pattern") or 6)
    return [(layer + 1) % pattern != 0 for layer in range(int(config["num_hidden_layers"]))]


def write_hyperparameters(writer: Any, config: Dict[str, Any]) -> None:
    """The `{arch}.*` keys llama.cpp builds the graph from."""
    import gguf

    family = family_for(config)
    if family.architecture == "gemma4":  # per-layer head sizes and ropes: keys of its own
        gemma4.write_hyperparameters(writer, config, float(config.get("rms_norm_eps") or 1e-6))
        return
    if family.architecture == "gemma3n":  # AltUp, Laurel and per-layer inputs: keys of its own
        gemma3n.write_hyperparameters(writer, config)
        return
    if family.architecture in qwen35.ARCHITECTURES:  # delta-net, rope sections and experts: keys of its own
        qwen35.write_hyperparameters(writer, config)
        return
    if family.architecture == "deepseek2":  # one latent key/value head: keys of its own
        latent_attention.write_hyperparameters(writer, config)
        return
    dims = head_dim(config)
    writer.add_context_length(int(config.get("max_position_embeddings") or 4096))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(feed_forward_length(config))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(kv_head_counts(config))
    writer.add_key_length(dims)
    writer.add_value_length(dims)
    writer.add_rope_dimension_count(int(dims * float(config.get("partial_rotary_factor") or 1.0)))
    writer.add_rope_freq_base(rope_base(config))
    writer.add_layer_norm_rms_eps(_rms_norm_eps(config))
    layer_norm_eps = config.get("layer_norm_eps") or config.get("layer_norm_epsilon") or config.get("norm_epsilon")
    if layer_norm_eps:  # the families normed by LayerNorm read this key instead
        writer.add_layer_norm_eps(float(layer_norm_eps))
    scaling = rope_scaling(config)
    if scaling is not None and scaling["rope_type"] == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    if scaling is not None and scaling["rope_type"] == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        writer.add_rope_scaling_yarn_beta_fast(float(scaling.get("beta_fast", 32.0)))
        writer.add_rope_scaling_yarn_beta_slow(float(scaling.get("beta_slow", 1.0)))
        if family.yarn_log_mul and scaling.get("mscale_all_dim"):
            writer.add_rope_scaling_yarn_log_mul(float(scaling["mscale_all_dim"]))
        attention = scaling.get("attention_factor", scaling.get("attn_factor"))
        if attention is not None:
            writer.add_rope_scaling_yarn_attn_factor(float(attention))
    if family.architecture == "gemma2":
        writer.add_float32("gemma2.attn_logit_softcapping", float(config.get("attn_logit_softcapping") or 50.0))
        writer.add_float32("gemma2.final_logit_softcapping", float(config.get("final_logit_softcapping") or 30.0))
        writer.add_sliding_window(int(config.get("sliding_window") or 4096))
    if family.architecture == "gemma3":
        writer.add_sliding_window(int(config.get("sliding_window") or 512))
        writer.add_array("gemma3.attention.sliding_window_pattern", _sliding_layers(config))
        writer.add_float32("gemma3.rope.freq_base_swa", rope_base(config, local=True))
        if config.get("final_logit_softcapping"):
            writer.add_float32("gemma3.final_logit_softcapping", float(config["final_logit_softcapping"]))
    if family.architecture == "mistral3" and (scaling or {}).get("llama_4_scaling_beta"):
        # Llama 4's attention temperature, growing with each multiple of the original context.
        writer.add_attn_temperature_scale(float(scaling["llama_4_scaling_beta"]))  # type: ignore[index]
    write_family_keys(writer, config, family.architecture)


# Tensors llama.cpp's kernels read as float32 only (convolution kernels, routers), as its converter keeps them.
_FLOAT32_ONLY = re.compile(r"\.(ssm_conv1d|shortconv\.conv|ffn_gate_inp)\.weight$")


def stored_type(data: np.ndarray, wanted: str, name: str = "") -> str:
    """What one tensor is stored as: vectors, norms, suffix-less tensors and `_FLOAT32_ONLY` stay F32; a row
    the type's block does not divide falls back to F16."""
    import gguf

    if data.ndim < 2 or wanted == "F32" or name.endswith("_norm.weight") or _FLOAT32_ONLY.search(name):
        return "F32"
    if name and not name.endswith(".weight"):
        return "F32"
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[wanted]]
    return wanted if data.shape[-1] % block == 0 else "F16"


def _add_keys(writer: Any, keys: TokenizerKeys) -> None:
    import gguf

    for key, (value, value_type, item_type) in keys.items():
        item = None if item_type is None else gguf.GGUFValueType[item_type]
        writer.add_key_value(key, value, gguf.GGUFValueType[value_type], item)


def write_gguf(
    path: Path,
    tensors: Dict[str, np.ndarray],
    config: Dict[str, Any],
    tokenizer: TokenizerKeys,
    type_name: str,
    file_type: Any,
    name: str = "unsloth",
) -> Dict[str, str]:
    """Write one GGUF file with every matrix in `type_name`; returns each tensor's stored type."""
    import gguf

    family = family_for(config)
    writer = gguf.GGUFWriter(str(path), family.architecture)
    writer.add_name(name)
    write_hyperparameters(writer, config)
    _add_keys(writer, tokenizer)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    stored = {}
    for tensor_name, data in tensors.items():
        stored[tensor_name] = stored_type(data, type_name, tensor_name)
        if stored[tensor_name] == "F32":
            writer.add_tensor(tensor_name, data)
        else:
            kind = gguf.GGMLQuantizationType[stored[tensor_name]]
            writer.add_tensor(tensor_name, gguf.quants.quantize(np.ascontiguousarray(data), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored
