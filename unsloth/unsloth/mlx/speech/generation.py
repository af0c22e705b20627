# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper's `generate` as transformers runs it on a clip of at most one window, on MLX: the prompt from the
generation config's language and task, the token budget, the suppressed tokens, then greedy decoding or beam search
with transformers' scoring (log-softmax, the length penalty on the generated length, its stopping rule). Each clip
gives the ids after the prompt, the end token dropped, repeated `num_return_sequences` times as transformers'
Whisper repeats its inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

import mlx.core as mx
import numpy as np

# transformers' GenerationConfig default, used when the model's config leaves max_length unset.
DEFAULT_MAX_LENGTH = 20
# transformers' score for a beam that must not win: finite, so that sums of scores stay ordered.
UNCHOSEN = -1.0e9
# Generation settings that change transformers' decoding and are not built here, with the values that mean "off".
UNBUILT = {
    "repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "bad_words_ids": (None,),
    "sequence_bias": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
}


def whisper_prompt(settings: Any, language: Optional[str] = None, task: Optional[str] = None) -> List[int]:
    """`<|startoftranscript|>`, the language, the task (transcribe unless set) and `<|notimestamps|>`."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    language = language or getattr(settings, "language", None)
    if language is None:
        raise NotImplementedError(
            "Whisper's generate on MLX needs a language (model.generation_config.language, which the notebook sets "
            "to '<|en|>', or language=): transformers' Whisper would detect each clip's language first, which is "
            "not built on MLX"
        )
    if getattr(settings, "forced_decoder_ids", None) is not None or getattr(settings, "return_timestamps", False):
        raise NotImplementedError(
            "Whisper's generate on MLX builds the prompt from generation_config.language and task; set "
            "model.generation_config.forced_decoder_ids = None and leave return_timestamps off"
        )
    name = language.lower()
    code = TO_LANGUAGE_CODE.get(name, name)
    token = name if name in settings.lang_to_id else f"<|{code}|>"
    task = task or getattr(settings, "task", None) or "transcribe"
    start = settings.decoder_start_token_id
    return [start, settings.lang_to_id[token], settings.task_to_id[task], settings.no_timestamps_token_id]


def new_token_budget(
    positions: int, prompt_length: int, max_length: Optional[int], max_new_tokens: Optional[int]
) -> int:
    """How many tokens transformers' Whisper generates at most: `max_new_tokens` if set, else `max_length` counted
    after the prompt's first tokens (at most half the decoder's positions), both within `max_target_positions`."""
    if max_new_tokens is not None:
        if max_new_tokens + prompt_length > positions:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} after a prompt of {prompt_length} tokens exceeds Whisper's "
                f"max_target_positions ({positions}); reduce max_new_tokens"
            )
        return max_new_tokens
    starts = min(positions // 2 - 1, prompt_length)
    return min((max_length or DEFAULT_MAX_LENGTH) + starts, positions) - prompt_length


def _ids(value: Any) -> Tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(token) for token in value)


@dataclass(frozen=True)
class Decoding:
    """One `generate` call's choices, resolved from its keywords and the model's generation config."""

    prompt: Tuple[int, ...]
    new_tokens: int
    end_tokens: Tuple[int, ...]
    suppressed: Tuple[int, ...] = ()
    suppressed_first: Tuple[int, ...] = ()
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: Union[bool, str] = False
    copies: int = 1


def _chosen(name: str, chosen: dict, settings: Any, default: Any) -> Any:
    value = chosen[name] if name in chosen else getattr(settings, name, None)
    return default if value is None else value


def resolve_decoding(settings: Any, prompt: Sequence[int], new_tokens: int, chosen: dict) -> Decoding:
    """The call's keywords over the generation config's, refusing sampling and the decoding rules not built."""
    if _chosen("do_sample", chosen, settings, False):
        raise NotImplementedError(
            "do_sample=True on MLX Whisper: sampling is not built; greedy decoding and beam search (num_beams) are"
        )
    for name, off in UNBUILT.items():
        value = _chosen(name, chosen, settings, None)
        if value not in off:
            raise NotImplementedError(f"{name}={value!r} on MLX Whisper: that decoding rule is not built")
    beams, copies = (
        int(_chosen("num_beams", chosen, settings, 1)),
        int(_chosen("num_return_sequences", chosen, settings, 1)),
    )
    early = _chosen("early_stopping", chosen, settings, False)
    # transformers' own checks of these values, with its messages' facts.
    if beams < 1 or copies > beams or (copies > 1 and beams == 1):
        raise ValueError(
            f"num_return_sequences ({copies}) has to be at most num_beams ({beams}), and 1 without beam search"
        )
    if early not in (True, False, "never"):
        raise ValueError(f"early_stopping must be a boolean or 'never', but is {early!r}")
    return Decoding(
        prompt=tuple(prompt),
        new_tokens=new_tokens,
        end_tokens=_ids(_chosen("eos_token_id", chosen, settings, None)),
        suppressed=_ids(_chosen("suppress_tokens", chosen, settings, None)),
        suppressed_first=_ids(_chosen("begin_suppress_tokens", chosen, settings, None)),
        num_beams=beams,
        length_penalty=float(_chosen("length_penalty", chosen, settings, 1.0)),
        early_stopping=early,
        copies=copies,
    )


def _log_probs(logits: mx.array, decoding: Decoding, first: bool) -> mx.array:
    """Each row's log-softmax, the suppressed tokens (and at the first step the begin-suppressed ones) at -inf."""
    logits = logits.astype(mx.float32)
    scores = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    banned = decoding.suppressed + (decoding.suppressed_first if first else ())
    if banned:
        scores[:, mx.array(banned)] = -mx.inf
    return scores


def _greedy(model: Any, audio: mx.array, decoding: Decoding) -> List[int]:
    """One clip's ids after the prompt, the most likely token each step, until an end token or the budget."""
    logits, cache, _ = model.decoder(mx.array([decoding.prompt]), audio)
    generated: List[int] = []
    while len(generated) < decoding.new_tokens:
        token = int(mx.argmax(_log_probs(logits[:, -1], decoding, not generated)[0]).item())
        if token in decoding.end_tokens:
            break
        generated.append(token)
        logits, cache, _ = model.decoder(mx.array([[token]]), audio, kv_cache=cache)
    return generated


def _best(values: mx.array, count: int) -> mx.array:
    """The indices of each row's `count` largest values, largest first, as torch.topk orders them."""
    part = mx.argpartition(-values, kth=count - 1, axis=-1)[:, :count]
    order = mx.argsort(-mx.take_along_axis(values, part, axis=-1), axis=-1)
    return mx.take_along_axis(part, order, axis=-1)


def _gather(values: mx.array, index: mx.array) -> mx.array:
    """`values[b, index[b, j], ...]` for (clips, beams, ...) arrays."""
    shaped = index.reshape(*index.shape, *([1] * (values.ndim - 2)))
    return mx.take_along_axis(values, shaped, axis=1)


def _mark(condition: mx.array) -> mx.array:
    return condition.astype(mx.float32) * UNCHOSEN


class _Finished:
    """The best `num_beams` ended hypotheses per clip, their penalised scores and whether each slot holds one."""

    def __init__(self, clips: int, beams: int, total: int) -> None:
        self.tokens = mx.full((clips, beams, total), -1, dtype=mx.int32)
        self.scores = mx.full((clips, beams), UNCHOSEN, dtype=mx.float32)
        self.filled = mx.zeros((clips, beams), dtype=mx.bool_)

    def add(self, tokens: mx.array, scores: mx.array, ended: mx.array) -> None:
        merged = mx.concatenate([self.scores, scores], axis=1)
        keep = _best(merged, self.scores.shape[1])
        self.tokens = _gather(mx.concatenate([self.tokens, tokens], axis=1), keep)
        self.scores = mx.take_along_axis(merged, keep, axis=1)
        self.filled = mx.take_along_axis(mx.concatenate([self.filled, ended], axis=1), keep, axis=1)


def _beam_search(model: Any, audio: mx.array, decoding: Decoding) -> List[List[int]]:
    """transformers' beam search over all clips at once, every beam a row of the decoder's batch and its KV cache
    reordered to follow the beams kept each step."""
    clips, beams, start = audio.shape[0], decoding.num_beams, len(decoding.prompt)
    total = start + decoding.new_tokens
    candidates = max(2, 1 + len(decoding.end_tokens)) * beams
    penalty, early = decoding.length_penalty, decoding.early_stopping
    # The prompt is read once per clip; each beam starts from a copy of its cache.
    logits, cache, _ = model.decoder(mx.array([decoding.prompt] * clips), audio)
    cache = [tuple((mx.repeat(k, beams, 0), mx.repeat(v, beams, 0)) for k, v in layer) for layer in cache]
    audio = mx.repeat(audio, beams, axis=0)
    logits = mx.repeat(logits[:, -1], beams, axis=0)
    running = mx.full((clips, beams, total), -1, dtype=mx.int32)
    running[:, :, :start] = mx.array(decoding.prompt, dtype=mx.int32)
    # Only the first beam starts live, so the first step does not pick the same token once per beam.
    running_scores = mx.array([[0.0] + [UNCHOSEN] * (beams - 1)] * clips)
    finished = _Finished(clips, beams, total)
    improvable = mx.ones((clips, 1), dtype=mx.bool_)
    first_candidates = mx.arange(candidates) < beams
    ends = mx.array(decoding.end_tokens or (-1,))
    offsets = (mx.arange(clips) * beams)[:, None]
    length = start
    while True:
        scores = _log_probs(logits, decoding, length == start)
        vocabulary = scores.shape[-1]
        totals = (scores.reshape(clips, beams, vocabulary) + running_scores[:, :, None]).reshape(clips, -1)
        picked = _best(totals, candidates)
        picked_scores = mx.take_along_axis(totals, picked, axis=1)
        origin, token = picked // vocabulary, (picked % vocabulary).astype(mx.int32)
        grown = _gather(running, origin)
        grown[:, :, length] = token
        stopped = mx.logical_or((token[:, :, None] == ends).any(axis=-1), length + 1 >= total)
        # The best `num_beams` candidates that did not stop run on.
        alive_scores = picked_scores + _mark(stopped)
        kept = _best(alive_scores, beams)
        running, running_scores = _gather(grown, kept), mx.take_along_axis(alive_scores, kept, axis=1)
        kept_origin = mx.take_along_axis(origin, kept, axis=1)
        # Of the first `num_beams` candidates, those that stopped join the finished ones, scored per generated token.
        ended = mx.logical_and(stopped, first_candidates)
        ended_scores = picked_scores / ((length + 1 - start) ** penalty)
        full = mx.logical_and(finished.filled.all(axis=-1, keepdims=True), early is True)
        ended_scores = ended_scores + _mark(full) + _mark(mx.logical_not(improvable)) + _mark(mx.logical_not(ended))
        finished.add(grown, ended_scores, ended)
        length += 1
        hoped_length = total - start if early == "never" and penalty > 0.0 else length - start
        best_running = running_scores[:, :1] / (hoped_length**penalty)
        worst_finished = mx.where(finished.filled, finished.scores.min(axis=1, keepdims=True), UNCHOSEN)
        improvable = mx.logical_and(improvable, (best_running > worst_finished).any(axis=-1, keepdims=True))
        all_full = finished.filled.all().item() and early is True
        if not improvable.any().item() or all_full or stopped.all().item():
            break
        rows = (kept_origin + offsets).reshape(-1)
        cache = [((k[rows], v[rows]), cross) for (k, v), cross in cache]
        logits, cache, _ = model.decoder(running[:, :, length - 1].reshape(-1, 1), audio, kv_cache=cache)
        logits = logits[:, -1]
    return [_generated(row, start, decoding.end_tokens) for row in np.array(finished.tokens[:, 0])]


def _generated(row: np.ndarray, start: int, end_tokens: Tuple[int, ...]) -> List[int]:
    """A hypothesis' ids after the prompt, without its padding and its end token, as transformers' Whisper cuts it."""
    ids = [int(token) for token in row[start:] if token >= 0]
    return ids[:-1] if ids and ids[-1] in end_tokens else ids


def generate_ids(model: Any, mels: np.ndarray, decoding: Decoding) -> List[List[int]]:
    """Each clip's generated ids (frames first, as mlx-audio's encoder reads them), `copies` times in a row."""
    audio = model.encoder(mx.array(mels).astype(model.dtype))
    if decoding.num_beams > 1:
        rows = _beam_search(model, audio, decoding)
    else:
        rows = [_greedy(model, audio[index : index + 1], decoding) for index in range(len(mels))]
    return [row for row in rows for _ in range(decoding.copies)]
