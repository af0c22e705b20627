# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""sentence-transformers' losses, computed in MLX from the loss object a notebook built.

A notebook writes `losses.MultipleNegativesRankingLoss(model)`; the trainer reads that object's settings (scale,
similarity, directions) and computes the same value here. LOSSES holds the ones that run, REFUSED why the others
do not; a loss in neither is refused by name too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import mlx.core as mx

DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
REFUSED = {
    # Its gradient cache is a CUDA memory trick over the same loss; MultipleNegativesRankingLoss gives its values.
    "CachedMultipleNegativesRankingLoss": "use MultipleNegativesRankingLoss, which computes the same loss whole",
    "MatryoshkaLoss": "its truncated-dimension passes are not implemented on MLX yet",
    "GISTEmbedLoss": "it needs a second (guide) model, which the MLX trainer does not run",
    "CachedGISTEmbedLoss": "it needs a second (guide) model, which the MLX trainer does not run",
}


def cosine_matrix(a: mx.array, b: mx.array) -> mx.array:
    """ST's cos_sim: rows normalized (eps 1e-12, as torch's F.normalize), then a @ b.T."""
    a = a / mx.maximum(mx.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b / mx.maximum(mx.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    return a @ b.T


def dot_matrix(a: mx.array, b: mx.array) -> mx.array:
    return a @ b.T


SIMILARITIES: Dict[str, Callable[[mx.array, mx.array], mx.array]] = {"cos_sim": cosine_matrix, "dot_score": dot_matrix}


@dataclass(frozen=True)
class RankingLoss:
    """MultipleNegativesRankingLoss: each query's own document against every document in the batch (and, with
    more directions, the other queries), scaled, as one softmax cross-entropy."""

    scale: float = 20.0
    similarity: Callable[[mx.array, mx.array], mx.array] = cosine_matrix
    directions: Sequence[str] = ("query_to_doc",)
    partition_mode: str = "joint"

    def __call__(self, embeddings: List[mx.array], labels: Optional[mx.array] = None) -> mx.array:
        if len(embeddings) < 2:
            raise ValueError(f"MultipleNegativesRankingLoss needs at least 2 columns, got {len(embeddings)}")
        queries, docs = embeddings[0], embeddings[1:]
        batch = queries.shape[0]
        docs_all = mx.concatenate(docs, axis=0)
        own = mx.eye(batch, dtype=mx.bool_)
        blocked = mx.array(-mx.inf, dtype=queries.dtype)
        matrices = {"query_to_doc": self.similarity(queries, docs_all)}
        if "query_to_query" in self.directions:
            matrices["query_to_query"] = mx.where(own, blocked, self.similarity(queries, queries))
        if "doc_to_query" in self.directions:
            matrices["doc_to_query"] = self.similarity(queries, docs[0]).T
        if "doc_to_doc" in self.directions:
            same = mx.concatenate([own] * len(docs), axis=1)
            matrices["doc_to_doc"] = mx.where(same, blocked, self.similarity(docs_all, docs[0]).T)
        scaled = {name: matrix * self.scale for name, matrix in matrices.items() if name in self.directions}
        positive = mx.diagonal(scaled["query_to_doc"][:, :batch])
        if self.partition_mode == "joint":
            log_z = mx.logsumexp(mx.concatenate(list(scaled.values()), axis=1), axis=1)
        else:
            log_z = sum(mx.logsumexp(matrix, axis=1) for matrix in scaled.values()) / len(scaled)
        return -(positive - log_z).mean()


def pairwise_cosine(a: mx.array, b: mx.array) -> mx.array:
    a = a / mx.maximum(mx.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b / mx.maximum(mx.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    return (a * b).sum(axis=-1)


def pairwise_dot(a: mx.array, b: mx.array) -> mx.array:
    return (a * b).sum(axis=-1)


PAIRWISE = {"pairwise_cos_sim": pairwise_cosine, "pairwise_dot_score": pairwise_dot}
# TripletLoss's distances, by the name of the TripletDistanceMetric member the loss holds.
DISTANCES = {
    "COSINE": lambda a, b: 1 - pairwise_cosine(a, b),
    "EUCLIDEAN": lambda a, b: mx.sqrt(((a - b) ** 2).sum(axis=-1)),
    "MANHATTAN": lambda a, b: mx.abs(a - b).sum(axis=-1),
}


@dataclass(frozen=True)
class CoSENT:
    """CoSENTLoss: log(1 + sum of exp(s_i - s_j)) over pairs whose label i is below label j, s scaled."""

    scale: float = 20.0
    similarity: Callable[[mx.array, mx.array], mx.array] = pairwise_cosine

    def __call__(self, embeddings: List[mx.array], labels: Optional[mx.array] = None) -> mx.array:
        if labels is None:
            raise ValueError("CoSENTLoss needs a `label` or `score` column")
        scores = self.similarity(embeddings[0], embeddings[1]) * self.scale
        labels = labels.reshape(-1).astype(mx.float32)
        lower = labels[:, None] < labels[None, :]
        gaps = mx.where(lower, scores[:, None] - scores[None, :], mx.array(-mx.inf, scores.dtype)).reshape(-1)
        return mx.logsumexp(mx.concatenate([mx.zeros((1,), scores.dtype), gaps]), axis=0)


@dataclass(frozen=True)
class Triplet:
    """TripletLoss: relu(d(anchor, positive) - d(anchor, negative) + margin), averaged."""

    distance: Callable[[mx.array, mx.array], mx.array]
    margin: float = 5.0

    def __call__(self, embeddings: List[mx.array], labels: Optional[mx.array] = None) -> mx.array:
        anchor, positive, negative = embeddings
        return mx.maximum(self.distance(anchor, positive) - self.distance(anchor, negative) + self.margin, 0).mean()


def _pairwise_name(loss: Any) -> str:
    name = getattr(loss.similarity_fct, "__name__", str(loss.similarity_fct))
    if name not in PAIRWISE:
        raise NotImplementedError(f"CoSENTLoss(similarity_fct={name}) is not supported on MLX ({', '.join(PAIRWISE)})")
    return name


def _cosent_loss(loss: Any) -> CoSENT:
    return CoSENT(scale=float(loss.scale), similarity=PAIRWISE[_pairwise_name(loss)])


def _triplet_loss(loss: Any) -> Triplet:
    import importlib

    metrics = importlib.import_module(type(loss).__module__).TripletDistanceMetric
    name = next((member for member in DISTANCES if getattr(metrics, member, None) is loss.distance_metric), None)
    if name is None:
        raise NotImplementedError(
            "TripletLoss with its own distance_metric is not supported on MLX (COSINE, EUCLIDEAN, MANHATTAN)"
        )
    return Triplet(DISTANCES[name], float(loss.triplet_margin))


def _similarity_name(loss: Any) -> str:
    function = getattr(loss, "similarity_fct", None)
    name = getattr(function, "__name__", str(function))
    if name not in SIMILARITIES:
        raise NotImplementedError(
            f"{type(loss).__name__}(similarity_fct={name}) is not supported on MLX (supported: {', '.join(SIMILARITIES)})"
        )
    return name


def _ranking_loss(loss: Any) -> RankingLoss:
    owner = type(loss).__name__
    if getattr(loss, "gather_across_devices", False):
        raise NotImplementedError(f"{owner}(gather_across_devices=True): the MLX trainer runs on one device")
    if getattr(loss, "hardness_mode", None) is not None and getattr(loss, "hardness_strength", 0.0) > 0.0:
        raise NotImplementedError(f"{owner}(hardness_mode={loss.hardness_mode!r}) is not implemented on MLX yet")
    return RankingLoss(
        scale=float(loss.scale),
        similarity=SIMILARITIES[_similarity_name(loss)],
        directions=tuple(getattr(loss, "directions", ("query_to_doc",))),
        partition_mode=getattr(loss, "partition_mode", "joint"),
    )


LOSSES: Dict[str, Callable[[Any], Callable[..., mx.array]]] = {
    "MultipleNegativesRankingLoss": _ranking_loss,
    "CoSENTLoss": _cosent_loss,
    "TripletLoss": _triplet_loss,
}


def embedding_loss(loss: Any) -> Callable[..., mx.array]:
    """The MLX loss for a sentence-transformers loss object."""
    if loss is None:
        raise NotImplementedError(
            "SentenceTransformerTrainer without loss= builds CoSENTLoss from a torch model; pass "
            "loss=losses.CoSENTLoss(model) or losses.MultipleNegativesRankingLoss(model) with the MLX model"
        )
    if isinstance(loss, dict):
        raise NotImplementedError("a dict of losses (one per dataset) is not supported by the MLX trainer")
    name = type(loss).__name__
    if name in LOSSES:
        return LOSSES[name](loss)
    reason = REFUSED.get(name, "it is not implemented on MLX")
    raise NotImplementedError(f"{name} cannot train on MLX: {reason} (supported: {', '.join(sorted(LOSSES))})")
