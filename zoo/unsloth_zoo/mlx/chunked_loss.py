# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Per-token log-probabilities without ever holding the whole `[tokens x vocabulary]` logits.

The model body gives hidden states; the output head (with the family's softcap or logit scale) then runs over a
chunk of positions at a time. With a frozen head each chunk's gradient is taken while its logits exist, so the
backward pass neither keeps nor recomputes them; a trainable head recomputes its chunk under `mx.checkpoint`.
A model whose head cannot be split this way (checked once against its own forward) gets the whole logits, and
says so once.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional

import mlx.core as mx
import mlx.nn as nn

logger = logging.getLogger(__name__)

#: Float32 logits one chunk may hold (16 MiB); a vocabulary of 262,144 gets 16 positions a chunk.
CHUNK_ELEMENTS = 1 << 22
#: Chunks a batch is cut into at least, so a chunk's logits, softmax and gradient stay a small share of what
#: the whole logits would take even when they fit in one 16 MiB chunk (short rows, a small vocabulary).
MIN_CHUNKS = 8
_VERDICT_ATTRIBUTE = "_unsloth_output_head_splits"
_CALL_VERDICT_ATTRIBUTE = "_unsloth_call_head_splits"
_PROBE = ((1, 2, 3, 4, 5, 6, 7, 8),)
_warned_whole: set = set()


class TokenScores(NamedTuple):
    """Each target's log-probability; with `statistics=True` also (stopped-gradient) entropy, mean logit and
    whether the most likely token was the target."""

    log_probs: mx.array
    entropy: Optional[mx.array] = None
    mean_logit: Optional[mx.array] = None
    argmax_hit: Optional[mx.array] = None


class OutputHead(NamedTuple):
    body: nn.Module
    module: nn.Module
    project: Callable[[mx.array], mx.array]
    softcap: Optional[float]
    scale: float


def _family_args(model: Any) -> Any:
    return getattr(model, "args", None) or getattr(getattr(model, "model", None), "args", None)


def _candidate_heads(model: Any) -> List[OutputHead]:
    """mlx-lm's possible heads after the body: `lm_head` or the tied embedding, with or without the config's
    softcap and logit scaling (granite divides, cohere multiplies); the forward pass decides which is real."""
    # A wrapper (Gemma 3, Mistral 3, ...) hands the whole call to its language model.
    while isinstance(model, dict) and "model" not in model and isinstance(model.get("language_model"), nn.Module):
        model = model["language_model"]
    body = model.get("model") if isinstance(model, dict) else None
    if not isinstance(body, nn.Module):
        return []
    args = _family_args(model)
    projections = []
    head, embed = model.get("lm_head"), body.get("embed_tokens")
    if isinstance(head, nn.Module):
        projections.append((head, head))
    if embed is not None and hasattr(embed, "as_linear"):
        projections.append((embed, embed.as_linear))
    if getattr(model, "tie_word_embeddings", False):
        projections.reverse()
    softcap = float(getattr(args, "final_logit_softcapping", None) or 0) or None
    scale = 1.0
    if getattr(args, "logits_scaling", None):
        scale /= float(args.logits_scaling)
    if getattr(args, "logit_scale", None):
        scale *= float(args.logit_scale)
    endings = dict.fromkeys([(softcap, scale), (None, scale), (softcap, 1.0), (None, 1.0)])
    return [
        OutputHead(body, module, project, cap, factor) for module, project in projections for cap, factor in endings
    ]


def _head_logits(head: OutputHead, hidden: mx.array, temperature: float) -> mx.array:
    logits = head.project(hidden)
    if head.scale != 1.0:
        logits = logits * head.scale
    if head.softcap is not None:
        logits = mx.tanh(logits / head.softcap) * head.softcap
    logits = logits.astype(mx.float32)
    return logits / temperature if temperature != 1.0 else logits


def _hidden(head: OutputHead, inputs: mx.array, cache: Any) -> mx.array:
    return head.body(inputs, cache=cache)


def output_head(model: Any) -> Optional[OutputHead]:
    """The model's output head when body-then-head reproduces its forward pass (checked once), else None."""
    candidates = _candidate_heads(model)
    verdict = getattr(model, _VERDICT_ATTRIBUTE, None)
    if verdict is None:
        verdict = next((index for index, head in enumerate(candidates) if _reproduces_forward(model, head)), -1)
        object.__setattr__(model, _VERDICT_ATTRIBUTE, verdict)
    return candidates[verdict] if 0 <= verdict < len(candidates) else None


def _reproduces_forward(model: Any, head: OutputHead) -> bool:
    probe = mx.array(_PROBE)
    # Compared without dropout, which would draw different masks for the two passes.
    training = getattr(model, "training", False)
    model.eval()
    try:
        whole = mx.stop_gradient(model(probe)).astype(mx.float32)
        split = mx.stop_gradient(_head_logits(head, _hidden(head, probe, None), 1.0))
        if whole.shape != split.shape:
            return False
        tolerance = 1e-4 * max(1.0, mx.abs(whole).max().item())
        return mx.abs(whole - split).max().item() <= tolerance
    except Exception:  # a body with another call signature or output: the whole logits are used instead
        return False
    finally:
        model.train(training)


def _say_whole_once(model: Any) -> None:
    name = getattr(model, "model_type", None) or getattr(_family_args(model), "model_type", None)
    name = name or type(model).__name__
    if name not in _warned_whole:
        _warned_whole.add(name)
        logger.warning(
            "%s: the output head cannot be split from the model body, so the loss holds the whole "
            "[tokens x vocabulary] logits (more memory at large vocabularies)",
            name,
        )


def _vocabulary(head: OutputHead) -> int:
    """The head's output width, read from its weight's first dimension (quantized or LoRA-wrapped alike)."""
    module = head.module
    while "weight" not in module and isinstance(module.get("linear"), nn.Module):
        module = module["linear"]
    weight = module.get("weight")
    # Unknown: assume Gemma's 262,144 so chunks stay small.
    return int(weight.shape[0]) if isinstance(weight, mx.array) else 262144


def chunk_positions(vocabulary: int, positions: Optional[int] = None) -> int:
    """Positions per chunk: at most CHUNK_ELEMENTS logits, and with `positions` at least MIN_CHUNKS chunks."""
    size = max(1, CHUNK_ELEMENTS // max(vocabulary, 1))
    if positions is not None:
        size = min(size, -(-positions // MIN_CHUNKS))
    return max(1, size)


def _scores_from_logits(logits: mx.array, targets: mx.array, statistics: bool) -> Dict[str, mx.array]:
    normaliser = mx.logsumexp(logits, axis=-1)
    picked = mx.take_along_axis(logits, targets[..., None], axis=-1).squeeze(-1)
    scores = {"log_probs": picked - normaliser}
    if statistics:
        plain = mx.stop_gradient(logits)
        probabilities = mx.exp(plain - mx.stop_gradient(normaliser)[..., None])
        scores["entropy"] = mx.stop_gradient(normaliser) - (probabilities * plain).sum(axis=-1)
        scores["mean_logit"] = plain.mean(axis=-1)
        scores["argmax_hit"] = (mx.argmax(plain, axis=-1) == targets).astype(mx.float32)
    return scores


_SCORE_NAMES = ("log_probs", "entropy", "mean_logit", "argmax_hit")


def _frozen_head_chunk(head: OutputHead, temperature: float, statistics: bool = False) -> Any:
    """A chunk's log-probabilities whose gradient is taken in the forward pass, so no logits outlive it; with
    `statistics`, the (stopped-gradient) statistics come from the same logits, after `unit`."""

    @mx.custom_function
    def chunk(hidden: mx.array, targets: mx.array) -> Any:
        def scores(inner: mx.array) -> List[mx.array]:
            found = _scores_from_logits(_head_logits(head, inner, temperature), targets, statistics)
            return [found[name] for name in _SCORE_NAMES if name in found]

        ones = mx.ones(targets.shape, dtype=mx.float32)
        cotangents = [ones] + [mx.zeros_like(ones)] * (len(_SCORE_NAMES) - 1 if statistics else 0)
        values, (unit,) = mx.vjp(scores, [hidden], cotangents)
        # Each target depends on its own position only, so a per-target cotangent scales its row of `unit`.
        return (values[0], mx.stop_gradient(unit), *values[1:])

    @chunk.vjp
    def chunk_vjp(primals: Any, cotangents: Any, outputs: Any) -> Any:
        hidden, targets = primals
        unit = outputs[1]
        return (cotangents[0][..., None] * unit).astype(hidden.dtype), mx.zeros_like(targets)

    return chunk


def _trainable_head_chunk(head: OutputHead, temperature: float) -> Any:
    """A chunk's log-probabilities recomputed in the backward pass, so the head's own weights get gradients."""

    def chunk(hidden: mx.array, targets: mx.array) -> mx.array:
        def log_probs(params: Any, inner: mx.array) -> mx.array:
            head.module.update(params)
            return _scores_from_logits(_head_logits(head, inner, temperature), targets, False)["log_probs"]

        # Targets are closed over: they are indices, which have no gradient.
        return mx.checkpoint(log_probs)(head.module.trainable_parameters(), hidden)

    return chunk


def _forward_only_chunk(head: OutputHead, temperature: float) -> Any:
    def chunk(hidden: mx.array, targets: mx.array) -> mx.array:
        logits = _head_logits(head, mx.stop_gradient(hidden), temperature)
        return _scores_from_logits(logits, targets, False)["log_probs"]

    return chunk


def _head_has_trainable_weights(head: OutputHead) -> bool:
    return any(True for _ in _leaves(head.module.trainable_parameters()))


def _leaves(tree: Any) -> Any:
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)
    elif isinstance(tree, mx.array):
        yield tree


def token_scores(
    model: Any,
    inputs: mx.array,
    targets: mx.array,
    *,
    cache: Any = None,
    temperature: float = 1.0,
    positions: Optional[mx.array] = None,
    statistics: bool = False,
    chunk: Optional[int] = None,
    differentiable: bool = True,
) -> TokenScores:
    """Log-probability of `targets` (`[rows, width]`) under `model` given `inputs`, in float32.

    `positions` (`[rows, width]`) picks which input positions predict the targets (all of them when None);
    `cache` is handed to the body as mlx-lm's per-layer caches are (a mask stand-in, say); `differentiable=False`
    (evaluation, a reference policy) skips the gradient work a frozen head otherwise does in the forward pass.
    """
    targets = targets.astype(mx.int32)
    head = output_head(model)
    if head is None:
        _say_whole_once(model)
        logits = model(inputs, cache=cache) if cache is not None else model(inputs)
        if positions is not None:
            logits = logits[mx.arange(logits.shape[0])[:, None], positions]
        logits = logits.astype(mx.float32)
        logits = logits / temperature if temperature != 1.0 else logits
        return TokenScores(**_scores_from_logits(logits, targets, statistics))
    hidden = _hidden(head, inputs, cache)
    if positions is not None:
        hidden = hidden[mx.arange(hidden.shape[0])[:, None], positions]
    return _chunked_scores(head, hidden, targets, temperature, statistics, chunk, differentiable)


def _chunked_scores(
    head: OutputHead,
    hidden: mx.array,
    targets: mx.array,
    temperature: float,
    statistics: bool,
    chunk: Optional[int],
    differentiable: bool,
) -> TokenScores:
    """The head over `hidden` (`[rows, width, hidden]`, one position per target) a chunk of positions at a time."""
    rows, width = targets.shape
    flat_hidden, flat_targets = hidden.reshape(rows * width, -1), targets.reshape(-1)
    size = chunk or chunk_positions(_vocabulary(head), rows * width)
    if not differentiable:
        step = _forward_only_chunk(head, temperature)
    elif _head_has_trainable_weights(head):
        step = _trainable_head_chunk(head, temperature)
    else:
        step = _frozen_head_chunk(head, temperature, statistics)
    # A frozen head's chunk gives the statistics from its own logits; the others compute them again.
    shared_statistics = statistics and differentiable and not _head_has_trainable_weights(head)
    pieces: Dict[str, list] = {}
    for start in range(0, rows * width, size):
        part_hidden, part_targets = flat_hidden[start : start + size], flat_targets[start : start + size]
        if pieces:
            # Chained after the previous chunk, so only one chunk's logits exist at a time.
            part_hidden = mx.depends(part_hidden, pieces["log_probs"][-1])
        found = step(part_hidden, part_targets)
        pieces.setdefault("log_probs", []).append(found[0] if isinstance(found, (tuple, list)) else found)
        if shared_statistics:
            for name, value in zip(_SCORE_NAMES[1:], found[2:]):
                pieces.setdefault(name, []).append(value)
        elif statistics:
            logits = _head_logits(head, mx.stop_gradient(part_hidden), temperature)
            for name, value in _scores_from_logits(logits, part_targets, True).items():
                if name != "log_probs":
                    pieces.setdefault(name, []).append(value)
    joined = {name: mx.concatenate(values).reshape(rows, width) for name, values in pieces.items()}
    return TokenScores(**joined)


# ---- a language model reached through another model's own call (mlx-vlm's image-text models) -------------------


def _call_heads(language_model: Any) -> List[OutputHead]:
    """The heads a language model's call may end in: its `lm_head`, or its body's tied embedding, each with or
    without the softcap (Gemma 4, Muse Glimmer) and the output multiplier (Muse Glimmer) it keeps as attributes."""
    body = language_model.get("model") if isinstance(language_model, dict) else None
    projections = []
    head = language_model.get("lm_head") if isinstance(language_model, dict) else None
    if isinstance(head, nn.Module):
        projections.append((head, head))
    embed = body.get("embed_tokens") if isinstance(body, nn.Module) else None
    if embed is not None and hasattr(embed, "as_linear"):
        projections.append((embed, embed.as_linear))
    softcap = float(getattr(language_model, _SOFTCAP_ATTRIBUTE, None) or 0) or None
    scale = float(getattr(language_model, _MULTIPLIER_ATTRIBUTE, None) or 1.0)
    endings = dict.fromkeys([(softcap, scale), (None, scale), (softcap, 1.0), (None, 1.0)])
    return [
        OutputHead(language_model, module, project, cap, factor)
        for module, project in projections
        for cap, factor in endings
    ]


# A language model that softcaps its logits after the head keeps the cap here; one that scales them, the factor.
_SOFTCAP_ATTRIBUTE = "final_logit_softcapping"
_MULTIPLIER_ATTRIBUTE = "output_multiplier"


class _HeadInputs(nn.Module):
    """An `lm_head` stand-in that hands its input on unchanged and keeps it."""

    def __init__(self, seen: List[mx.array]) -> None:
        super().__init__()
        object.__setattr__(self, "seen", seen)

    def __call__(self, hidden: mx.array) -> mx.array:
        self.seen.append(hidden)
        return hidden


@contextmanager
def _head_inputs_kept(language_model: Any) -> Iterator[List[mx.array]]:
    """Within: the language model's `lm_head` and tied `as_linear` hand the hidden states on unchanged, and the
    list yielded gets each input they were given; what the call does after the head (a softcap, a scale) then runs
    on the hidden states, which is cheap, and is never read."""
    seen: List[mx.array] = []
    head = language_model.get("lm_head")
    embed = language_model["model"].get("embed_tokens") if isinstance(language_model.get("model"), dict) else None
    if isinstance(head, nn.Module):
        language_model.lm_head = _HeadInputs(seen)
    if hasattr(embed, "as_linear"):
        object.__setattr__(embed, "as_linear", _HeadInputs(seen))
    try:
        yield seen
    finally:
        if isinstance(head, nn.Module):
            language_model.lm_head = head
        if hasattr(embed, "as_linear"):
            object.__delattr__(embed, "as_linear")


def _hidden_of_call(language_model: Any, call: Callable[[], Any]) -> Optional[mx.array]:
    """The hidden states the call's head is given, when it is given them once; else None."""
    with _head_inputs_kept(language_model) as seen:
        call()
    return seen[0] if len(seen) == 1 else None


def _logits_of(output: Any) -> mx.array:
    return getattr(output, "logits", output)


def _call_verdict(language_model: Any, call: Callable[[], Any], heads: List[OutputHead]) -> int:
    """Which head, applied to the hidden states the call hands its head, gives the call's own logits (-1: none)."""
    training = getattr(language_model, "training", False)
    language_model.eval()
    try:
        whole = mx.stop_gradient(_logits_of(call())).astype(mx.float32)
        hidden = _hidden_of_call(language_model, call)
        if hidden is None:
            return -1
        hidden = mx.stop_gradient(hidden)
        tolerance = 1e-4 * max(1.0, mx.abs(whole).max().item())
        for index, head in enumerate(heads):
            split = _head_logits(head, hidden, 1.0)
            if split.shape == whole.shape and mx.abs(whole - split).max().item() <= tolerance:
                return index
        return -1
    except Exception:  # a call that does not end in these heads: the whole logits are used instead
        return -1
    finally:
        language_model.train(training)


def settle_call_verdict(language_model: Any, call: Callable[[], Any]) -> int:
    """Which of the language model's heads `call` ends in (-1: none), checked once and kept on the model. Call it
    before differentiating: inside a gradient trace the two checking passes' activations stay alive until the trace
    ends, which made a checkpointed first step hold four times a later step's peak."""
    verdict = getattr(language_model, _CALL_VERDICT_ATTRIBUTE, None)
    if verdict is None:
        heads = _call_heads(language_model)
        verdict = _call_verdict(language_model, call, heads) if heads else -1
        object.__setattr__(language_model, _CALL_VERDICT_ATTRIBUTE, verdict)
    return verdict


def call_token_scores(
    language_model: Any, call: Callable[[], Any], targets: mx.array, *, chunk: Optional[int] = None
) -> TokenScores:
    """Log-probability of `targets` under the logits `call()` returns, where the call (a vision model's own, say)
    ends in `language_model`'s head: the call runs with the head passing hidden states through, and the head then
    runs a chunk of positions at a time. Checked once against the call's own logits; else the whole logits."""
    targets = targets.astype(mx.int32)
    heads = _call_heads(language_model)
    verdict = settle_call_verdict(language_model, call)
    hidden = _hidden_of_call(language_model, call) if verdict >= 0 else None
    if hidden is None:
        _say_whole_once(language_model)
        logits = _logits_of(call()).astype(mx.float32)
        return TokenScores(**_scores_from_logits(logits, targets, False))
    return _chunked_scores(heads[verdict], hidden, targets, 1.0, False, chunk, True)
