# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`Converter`: one family's way from Hugging Face weights and config to GGUF, with the common path as defaults.

A family module lists its entries in `CONVERTERS` (model_type -> Converter); `gguf.registry` collects them and
`convert` looks the model's type up there. A family overrides only the hooks where it differs from the common path,
as llama.cpp's `convert_hf_to_gguf.py` classes override `set_gguf_parameters` and `modify_tensors`.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Type, Union

import numpy as np

from ..families import Family, UnsupportedModel
from .architectures import Piece, attention_kv_heads, has_experts, split_weight

# The rope scalings llama.cpp's graphs reproduce from the keys the common path writes.
_ROPE_TYPES = {"default", "linear", "llama3"}
# YaRN settings mlx_lm's YarnRoPE and llama.cpp's graph read differently, with the value each takes by default.
# (llama.cpp recomputes the attention factor from the scaling factor whatever the file says, as mlx_lm does.)
_YARN_READ_APART = {"extrapolation_factor": 1.0, "mscale": 1.0}


class Converter:
    """How one model type becomes llama.cpp's architecture; every hook defaults to the common path."""

    yarn_refusal = ""  # why YaRN is refused for this family, where more is known than "not checked here"
    embedding_weight = "model.embed_tokens.weight"  # the token embedding's name in mlx_lm's model

    def __init__(self, family: Family) -> None:
        self.family = family

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.family.architecture!r})"

    def with_common_keys(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The config with the keys the common path reads (`num_hidden_layers`, `hidden_size`, ...) as mlx_lm builds the
        model, for families that name or count them otherwise."""
        return config

    def with_weight_settings(self, config: Dict[str, Any], weights: Dict[str, np.ndarray]) -> Dict[str, Any]:
        """The config with the settings mlx_lm keeps as weights and llama.cpp reads as keys (Apertus' xIELU)."""
        return config

    def family_for(self, config: Dict[str, Any]) -> Family:
        """The architecture written for this config (a family whose settings pick between two overrides it)."""
        return self.family

    def refuse(self, config: Dict[str, Any]) -> None:
        """Raise UnsupportedModel for a setting llama.cpp's graph would not run as mlx_lm does."""

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """The weights as the tensor loop reads them (stacked, clipped, ...)."""
        return weights

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        """One weight as the llama.cpp tensors it becomes; unnamed pieces go through `tensor_names`."""
        return split_weight(name, data, config)

    def tensor_names(self, family: Family, config: Dict[str, Any]) -> Any:
        """Hugging Face names to llama.cpp's, from the `gguf` package's map for the architecture."""
        import gguf

        return gguf.TensorNameMap(family.arch, int(config["num_hidden_layers"]))

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        return rope_base(config, local)

    def rope_scaling(self, config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The rope scaling llama.cpp applies from the common keys; one it would not apply alike is refused."""
        return rope_scaling(config, self.family, self.yarn_refusal)

    def rope_tensors(self, config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """Extra tensors the rope needs: Llama 3's frequency factors."""
        scaling = self.rope_scaling(config)
        if scaling is not None and scaling["rope_type"] == "llama3":
            return {"rope_freqs.weight": llama3_rope_factors(config, scaling, self.rope_base(config))}
        return {}

    def attention_layers(self, config: Dict[str, Any]) -> Optional[List[bool]]:
        """Which layers attend, for families mixing attention with recurrent blocks; None when all do."""
        return None

    def head_counts(self, config: Dict[str, Any]) -> Union[int, List[int]]:
        """head_count: one number, or one per layer where layers differ (Step 3.5's sliding layers)."""
        return int(config["num_attention_heads"])

    def kv_head_counts(self, config: Dict[str, Any]) -> Union[int, List[int]]:
        """head_count_kv: one number, or one per layer with 0 marking a recurrent layer (how llama.cpp finds them)."""
        return attention_kv_heads(config, self.attention_layers(config))

    def feed_forward_length(self, config: Dict[str, Any]) -> Union[int, List[int]]:
        return int(config["intermediate_size"])

    def value_dims(self, config: Dict[str, Any]) -> int:
        """Each value head's width, where it differs from the key heads'."""
        return head_dim(config)

    def rotary_dims(self, config: Dict[str, Any]) -> int:
        """How much of each head the rope rotates."""
        return int(head_dim(config) * float(config.get("partial_rotary_factor") or 1.0))

    def rms_norm_eps(self, config: Dict[str, Any]) -> float:
        return float(config.get("rms_norm_eps") or config.get("norm_eps") or 1e-6)

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        """The `{arch}.*` keys llama.cpp builds the graph from: the common ones, then `write_keys`."""
        import gguf

        dims = head_dim(config)
        writer.add_context_length(int(config.get("max_position_embeddings") or 4096))
        writer.add_embedding_length(int(config["hidden_size"]))
        writer.add_block_count(int(config["num_hidden_layers"]))
        writer.add_feed_forward_length(self.feed_forward_length(config))
        writer.add_head_count(self.head_counts(config))
        writer.add_head_count_kv(self.kv_head_counts(config))
        writer.add_key_length(dims)
        writer.add_value_length(self.value_dims(config))
        writer.add_rope_dimension_count(self.rotary_dims(config))
        writer.add_rope_freq_base(self.rope_base(config))
        writer.add_layer_norm_rms_eps(self.rms_norm_eps(config))
        layer_norm_eps = config.get("layer_norm_eps") or config.get("layer_norm_epsilon") or config.get("norm_epsilon")
        if layer_norm_eps:  # the families normed by LayerNorm read this key instead
            writer.add_layer_norm_eps(float(layer_norm_eps))
        scaling = self.rope_scaling(config)
        if scaling is not None and scaling["rope_type"] == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(float(scaling["factor"]))
        if scaling is not None and scaling["rope_type"] == "yarn":
            self._write_yarn(writer, scaling)
        self.write_keys(writer, config, self.family_for(config))

    def _write_yarn(self, writer: Any, scaling: Dict[str, Any]) -> None:
        import gguf

        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        writer.add_rope_scaling_yarn_beta_fast(float(scaling.get("beta_fast", 32.0)))
        writer.add_rope_scaling_yarn_beta_slow(float(scaling.get("beta_slow", 1.0)))
        if self.family.yarn_log_mul and scaling.get("mscale_all_dim"):
            writer.add_rope_scaling_yarn_log_mul(float(scaling["mscale_all_dim"]))
        attention = scaling.get("attention_factor", scaling.get("attn_factor"))
        if attention is not None:
            writer.add_rope_scaling_yarn_attn_factor(float(attention))

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        """The keys a family needs beyond the common ones; by default the expert counts, where it has experts."""
        if has_experts(config):
            writer.add_expert_count(int(config.get("num_local_experts") or config["num_experts"]))
            writer.add_expert_used_count(int(config["num_experts_per_tok"]))


def refusing(check: Any, error: Type[BaseException], config: Dict[str, Any]) -> None:
    """Run a family module's own refusal check, its error raised as UnsupportedModel with the same message."""
    try:
        check(config)
    except error as refused:
        raise UnsupportedModel(str(refused)) from None


def head_dim(config: Dict[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def rope_parameters(config: Dict[str, Any], layer_type: str = "full_attention") -> Dict[str, Any]:
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
    return float(config.get("rope_theta") or rope_parameters(config).get("rope_theta") or 10000.0)


def scaling_of(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The config's rope scaling as written, under either name transformers has used."""
    return config.get("rope_scaling") or rope_parameters(config) or None


def rope_scaling(config: Dict[str, Any], family: Optional[Family], yarn_refusal: str = "") -> Optional[Dict[str, Any]]:
    """The scaling with its `rope_type`, None when plain; one llama.cpp would not apply as mlx_lm does is refused."""
    scaling = scaling_of(config)
    if scaling is None:
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in _ROPE_TYPES and not (kind == "yarn" and family is not None and family.yarn):
        from ..registry import FAMILIES

        yarn = ", ".join(sorted(name for name, known in FAMILIES.items() if known.yarn))
        why = yarn_refusal or f"known: llama3, linear; yarn for {yarn}"
        raise UnsupportedModel(f"rope_scaling of type {kind!r} cannot be written to GGUF here ({why})")
    if kind == "yarn":
        _refuse_yarn_settings_read_apart(scaling, family)
    return None if kind == "default" else {**scaling, "rope_type": kind}


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


def llama3_rope_factors(config: Dict[str, Any], scaling: Dict[str, Any], base: float) -> np.ndarray:
    """Llama 3.1's per-frequency divisors: long wavelengths slowed by `factor`, short kept, a smooth band between."""
    dims = head_dim(config)
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    context = float(scaling.get("original_max_position_embeddings", 8192))
    factors = []
    for index in range(0, dims, 2):
        wavelength = 2 * math.pi * base ** (index / dims)
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
