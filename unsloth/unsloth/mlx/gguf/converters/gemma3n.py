# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Gemma 3n's text model as llama.cpp's gemma3n: its weights reshaped, its keys, and the settings refused.

Gemma 3n carries four AltUp streams through its layers (predicted, then corrected around the one the layer runs),
adds a low-rank Laurel branch beside attention, feeds each layer a per-layer token embedding, and makes its first
layers' MLP sparse by a Gaussian top-k. llama.cpp's loader (`src/models/gemma3n.cpp`, llama-cpp-python 0.3.36)
fixes several of these as the E2B and E4B have them instead of reading them from the file, so any other value is
refused here by name rather than exported to a model that would run differently.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence

import numpy as np

from ..families import Family
from .base import Converter, refusing

# What llama.cpp's gemma3n holds fixed (llama-hparams.h, models.h, gemma3n.cpp), under the config's names.
FIXED = {
    "altup_num_inputs": 4,
    "altup_active_idx": 0,
    "laurel_rank": 64,
    "hidden_size_per_layer_input": 256,
    "final_logit_softcapping": 30.0,
}
LAYERS_WITH_OWN_KV = 20  # llama.cpp's n_layer_kv_from_start: later layers reuse layer 18's (sliding) or 19's (full)
SPARSE_LAYERS = 10  # llama.cpp's n_layer_sparsity: these layers' MLPs keep the top 5% of gate activations
SPARSITY = 0.95
_STACKED = re.compile(r"^model\.(altup_projections|altup_unembed_projections)\.(\d+)\.weight$")
_COEFFICIENTS = (".altup.prediction_coefs.weight", ".altup.correction_coefs.weight")


class Gemma3nUnsupported(NotImplementedError):
    """A Gemma 3n setting llama.cpp's gemma3n graph does not reproduce as mlx_lm runs it."""


def _sparsity(config: Dict[str, Any]) -> List[float]:
    pattern = config.get("activation_sparsity_pattern")
    return [float(value) for value in (pattern or [0.0] * int(config["num_hidden_layers"]))]


def refuse_unsupported(config: Dict[str, Any]) -> None:
    """Name each setting an exported Gemma 3n would not run as the MLX model did, before any work."""
    for key, fixed in FIXED.items():
        value = config.get(key)
        if value is None or float(value) != float(fixed):
            raise Gemma3nUnsupported(f"gemma3n_text with {key}={value!r}: llama.cpp's gemma3n fixes it at {fixed!r}")
    layers = int(config["num_hidden_layers"])
    expected = [SPARSITY if layer < SPARSE_LAYERS else 0.0 for layer in range(layers)]
    if _sparsity(config) != expected:
        raise Gemma3nUnsupported(
            f"gemma3n_text with activation_sparsity_pattern {config.get('activation_sparsity_pattern')!r}: llama.cpp's "
            f"gemma3n makes the first {SPARSE_LAYERS} layers {SPARSITY} sparse and no other, so it needs {expected}"
        )
    _refuse_kv_sharing_read_apart(config, layers)


def _refuse_kv_sharing_read_apart(config: Dict[str, Any], layers: int) -> None:
    """mlx_lm lets the shared layers reuse the last own layer of their kind; llama.cpp, layers 18 and 19."""
    shared = int(config.get("num_kv_shared_layers") or 0)
    kinds = list(config["layer_types"])
    if shared == 0 and layers <= LAYERS_WITH_OWN_KV:
        return
    own = kinds[: layers - shared]
    last_full = max((index for index, kind in enumerate(own) if kind == "full_attention"), default=-1)
    last_sliding = max((index for index, kind in enumerate(own) if kind == "sliding_attention"), default=-1)
    if (layers - shared, last_full, last_sliding) != (LAYERS_WITH_OWN_KV, 19, 18):
        raise Gemma3nUnsupported(
            f"gemma3n_text with {layers} layers and num_kv_shared_layers={shared}: llama.cpp's gemma3n gives the "
            f"first {LAYERS_WITH_OWN_KV} layers their own keys and values, the later ones layer 18's (sliding) or "
            "19's (full), so it needs 20 own layers ending in a sliding and a full one"
        )


def prepare_weights(weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """The weights as llama.cpp's gemma3n reads them: the AltUp projections stacked, the coefficients clipped as
    mlx_lm clips them on every call, the output scale as applied, and one per-layer embedding row per token."""
    prepared: Dict[str, np.ndarray] = {}
    stacks: Dict[str, Dict[int, np.ndarray]] = {}
    clip = config.get("altup_coef_clip")
    for name, data in weights.items():
        stacked = _STACKED.match(name)
        if stacked is not None:
            stacks.setdefault(stacked.group(1), {})[int(stacked.group(2))] = data
        elif name.endswith(_COEFFICIENTS) and clip is not None:
            prepared[name] = np.clip(data, -float(clip), float(clip))
        elif name.endswith(".altup.correct_output_scale"):
            scale = data if config.get("altup_correct_scale", True) else np.ones_like(data)
            prepared[name + ".weight"] = scale  # llama.cpp names the scale as a weight
        elif name == "model.embed_tokens_per_layer.weight":
            prepared[name] = per_layer_rows(data, int(config["vocab_size"]))
        else:
            prepared[name] = data
    for stream, matrices in stacks.items():
        prepared[f"model.{stream}.weight"] = np.stack([matrices[index] for index in sorted(matrices)])
    return prepared


def per_layer_rows(table: np.ndarray, vocab_size: int) -> np.ndarray:
    """One row per token: mlx_lm reads row 0 for a token past the per-layer table, so those rows copy it."""
    missing = vocab_size - table.shape[0]
    if missing <= 0:
        return table[:vocab_size]
    return np.concatenate([table, np.repeat(table[:1], missing, axis=0)])


def _sparsity_scales(pattern: Sequence[float]) -> List[float]:
    """Each layer's cutoff in standard deviations (the normal quantile of its sparsity), as the converter writes."""
    from statistics import NormalDist

    return [NormalDist().inv_cdf(value) if value > 0 else 0.0 for value in pattern]


def write_hyperparameters(writer: Any, config: Dict[str, Any]) -> None:
    """The `gemma3n.*` keys: those llama.cpp reads (sizes, ropes, window and its pattern, norm epsilon) and, as its
    converter writes them, those it holds fixed."""
    head = int(config.get("head_dim") or 256)
    widths = config["intermediate_size"]
    writer.add_context_length(int(config.get("max_position_embeddings") or 32768))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length([int(width) for width in widths] if isinstance(widths, list) else int(widths))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_rope_freq_base(float(config.get("rope_theta") or 1000000.0))
    writer.add_rope_freq_base_swa(float(config.get("rope_local_base_freq") or 10000.0))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps") or 1e-6))
    writer.add_sliding_window(int(config["sliding_window"]))
    writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config["layer_types"]])
    writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
    writer.add_altup_active_idx(int(config["altup_active_idx"]))
    writer.add_altup_num_inputs(int(config["altup_num_inputs"]))
    writer.add_embedding_length_per_layer_input(int(config["hidden_size_per_layer_input"]))
    writer.add_shared_kv_layers(int(config.get("num_kv_shared_layers") or 0))
    writer.add_activation_sparsity_scale(_sparsity_scales(_sparsity(config)))


class Gemma3n(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        refusing(refuse_unsupported, Gemma3nUnsupported, config)

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return prepare_weights(weights, config)  # AltUp's projections stacked, its coefficients clipped

    def rope_tensors(self, config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {}  # mlx_lm's gemma3n rotates plainly, whatever rope_scaling says

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        write_hyperparameters(writer, config)


CONVERTERS = {"gemma3n_text": Gemma3n(Family("gemma3n"))}
