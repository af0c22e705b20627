# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""sentence-transformers' modules after the backbone, in MLX: Pooling (each mode it writes), Dense, Normalize."""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn

from .folder import DenseSpec

TANH = "torch.nn.modules.activation.Tanh"


def _masked(states: mx.array, mask: mx.array) -> mx.array:
    return states * mask[..., None].astype(states.dtype)


def _cls(states: mx.array, mask: mx.array) -> mx.array:
    return states[:, 0]


def _max(states: mx.array, mask: mx.array) -> mx.array:
    # ST fills padding with a very negative value before taking the maximum.
    return mx.where(mask[..., None].astype(mx.bool_), states, mx.array(-1e9, dtype=states.dtype)).max(axis=1)


def _mean(states: mx.array, mask: mx.array) -> mx.array:
    counts = mx.maximum(mask.astype(states.dtype).sum(axis=1, keepdims=True), 1e-9)
    return _masked(states, mask).sum(axis=1) / counts


def _mean_sqrt_len(states: mx.array, mask: mx.array) -> mx.array:
    counts = mx.maximum(mask.astype(states.dtype).sum(axis=1, keepdims=True), 1e-9)
    return _masked(states, mask).sum(axis=1) / mx.sqrt(counts)


def _weighted_mean(states: mx.array, mask: mx.array) -> mx.array:
    weights = mx.arange(1, states.shape[1] + 1, dtype=states.dtype)[None, :] * mask.astype(states.dtype)
    return (states * weights[..., None]).sum(axis=1) / mx.maximum(weights.sum(axis=1, keepdims=True), 1e-9)


def _last_token(states: mx.array, mask: mx.array) -> mx.array:
    """The last position the mask keeps, with left or right padding alike (ST's lasttoken)."""
    positions = mx.arange(states.shape[1])[None, :] * mask.astype(mx.int32)
    last = positions.max(axis=1)
    return mx.take_along_axis(states, last[:, None, None], axis=1)[:, 0]


POOLERS = {
    "cls": _cls,
    "max": _max,
    "mean": _mean,
    "mean_sqrt_len_tokens": _mean_sqrt_len,
    "weightedmean": _weighted_mean,
    "lasttoken": _last_token,
}


def pool(states: mx.array, mask: mx.array, modes: Sequence[str]) -> mx.array:
    """The modes' vectors side by side, in the order ST concatenates them."""
    pooled = [POOLERS[mode](states, mask) for mode in modes]
    return pooled[0] if len(pooled) == 1 else mx.concatenate(pooled, axis=-1)


class Dense(nn.Module):
    """ST's Dense: a linear layer and its activation (Identity or Tanh)."""

    def __init__(self, spec: DenseSpec) -> None:
        super().__init__()
        self.linear = nn.Linear(spec.in_features, spec.out_features, bias=spec.bias)
        self.tanh = spec.activation == TANH

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear(x)
        return mx.tanh(y) if self.tanh else y


def normalize(x: mx.array, eps: float = 1e-12) -> mx.array:
    """torch's F.normalize(p=2, dim=1), which ST's Normalize calls."""
    return x / mx.maximum(mx.linalg.norm(x, axis=-1, keepdims=True), eps)


def load_dense(folder: Any, spec: DenseSpec) -> Dense:
    dense = Dense(spec)
    path = folder / spec.path
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} holds no model.safetensors for its Dense layer")
    weights = {}
    for file in files:
        weights.update(mx.load(str(file)))
    dense.load_weights(list(weights.items()), strict=True)
    return dense
