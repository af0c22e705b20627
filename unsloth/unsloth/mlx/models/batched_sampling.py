# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Batched sampling on an mlx_lm model with mlx_lm's `BatchGenerator`: the engine of `fast_generate` and GRPO.

Every prompt becomes one row of mlx_lm's continuous batch. A row ends at an end-of-sequence token (kept in the
returned ids, as Hugging Face's `generate` keeps it), at `max_tokens`, or at a stop string once its decoded text
holds one; stop strings are checked only when some were asked for, so plain sampling runs at mlx_lm's own pace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import mlx.core as mx


@dataclass(frozen=True)
class Sampling:
    """What one batch samples with, in mlx_lm's terms (`top_k=0` and `top_p=1.0` mean off)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: Optional[float] = None
    seed: Optional[int] = None
    stop: Sequence[str] = ()
    include_stop_str_in_output: bool = False
    stop_token_ids: Sequence[int] = ()


@dataclass
class Sampled:
    """One prompt's completion: its token ids, its text, and why it ended ("stop" or "length")."""

    token_ids: List[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    stop_reason: Any = None


def make_mlx_sampler(sampling: Sampling) -> Any:
    from mlx_lm.sample_utils import make_sampler

    # mlx_lm treats top_p=0 and 1 alike (off); a temperature of 0 is greedy.
    return make_sampler(
        temp=float(sampling.temperature),
        top_p=float(sampling.top_p) if 0.0 < sampling.top_p < 1.0 else 0.0,
        min_p=float(sampling.min_p or 0.0),
        top_k=max(int(sampling.top_k or 0), 0),
    )


def _logits_processors(sampling: Sampling) -> Optional[List[Any]]:
    if sampling.repetition_penalty in (None, 1.0):
        return None
    from mlx_lm.sample_utils import make_logits_processors

    return make_logits_processors(repetition_penalty=float(sampling.repetition_penalty))


def eos_token_ids(tokenizer: Any, extra: Sequence[int] = ()) -> List[int]:
    """The tokenizer's end-of-sequence ids (one or several) plus any asked for."""
    eos = getattr(tokenizer, "eos_token_id", None)
    found = [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]
    return sorted({int(token) for token in [*found, *extra]})


def cut_at_stop(text: str, stops: Sequence[str], include: bool) -> Optional[tuple]:
    """(text up to the first stop string, that string), or None when no stop string is in `text`."""
    hits = [(text.find(stop), stop) for stop in stops if stop and stop in text]
    if not hits:
        return None
    index, stop = min(hits)
    return text[: index + len(stop)] if include else text[:index], stop


def sample_batch(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    sampling: Sampling,
    completion_batch_size: int = 32,
) -> List[Sampled]:
    """Complete every tokenized prompt in one continuous batch; results in the prompts' order."""
    from mlx_lm.generate import BatchGenerator

    if not prompts:
        return []
    if sampling.seed is not None:
        mx.random.seed(int(sampling.seed))
    stops = [stop for stop in sampling.stop if stop]
    eos = eos_token_ids(tokenizer, sampling.stop_token_ids)
    generator = BatchGenerator(
        model,
        stop_tokens=[[token] for token in eos],
        sampler=make_mlx_sampler(sampling),
        logits_processors=_logits_processors(sampling),
        completion_batch_size=max(completion_batch_size, len(prompts)),
        prefill_batch_size=min(max(len(prompts), 1), 8),
    )
    uids = generator.insert([list(map(int, prompt)) for prompt in prompts], [sampling.max_tokens] * len(prompts))
    results: Dict[int, Sampled] = {uid: Sampled() for uid in uids}
    try:
        while responses := generator.next_generated():
            stopped = []
            for response in responses:
                row = results[response.uid]
                row.token_ids.append(int(response.token))
                if response.finish_reason == "stop":
                    row.finish_reason, row.stop_reason = "stop", int(response.token)
                    continue
                if stops:
                    cut = cut_at_stop(tokenizer.decode(row.token_ids), stops, sampling.include_stop_str_in_output)
                    if cut is not None:
                        row.text, row.stop_reason, row.finish_reason = cut[0], cut[1], "stop"
                        if response.finish_reason is None:
                            stopped.append(response.uid)
            if stopped:
                generator.remove(stopped)
    finally:
        generator.close()
    for row in results.values():
        if not isinstance(row.stop_reason, str):
            # The end-of-sequence token stays in the ids (it is trained on) but not in the text.
            row.text = tokenizer.decode(row.token_ids, skip_special_tokens=True)
    return [results[uid] for uid in uids]
