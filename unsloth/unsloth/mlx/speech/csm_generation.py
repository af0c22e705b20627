# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`model.generate(**inputs, output_audio=True)` on an MLX CSM, frame by frame as transformers' `CsmGenerationMixin`:
the backbone picks the first codebook, the depth decoder the others, until a frame of eos codes or
`max_new_tokens` frames; `output_audio=True` decodes the codes before the eos frame with the model's Mimi."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import mlx.core as mx
import numpy as np

from .csm_training import kept_length, backbone_states, depth_logits, prompt_frames

DEPTH_PREFIX = "depth_decoder_"
SAMPLING = ("do_sample", "temperature", "top_k", "top_p")


def _setting(name: str, kwargs: Dict[str, Any], config: Any, prefix: str = "") -> Any:
    if prefix + name in kwargs:
        return kwargs.pop(prefix + name)
    return getattr(config, prefix + name, None)


def _picker(kwargs: Dict[str, Any], config: Any, prefix: str) -> Callable[[mx.array], mx.array]:
    """Greedy, or mlx-lm's sampler with the call's (else the generation config's) temperature, top-k and top-p."""
    do_sample, temperature, top_k, top_p = (_setting(name, kwargs, config, prefix) for name in SAMPLING)
    if not do_sample:
        return lambda logits: mx.argmax(logits, axis=-1)
    from mlx_lm.sample_utils import make_sampler

    sampler = make_sampler(temp=temperature or 1.0, top_p=top_p or 0.0, top_k=top_k or 0)
    return lambda logits: sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))


def _frame(model: Any, last_state: mx.array, pick: Any, pick_depth: Any) -> mx.array:
    """One frame's codes (batch, codebooks): the first from the backbone's state, the rest from the depth decoder."""
    codes = pick(model.codebook0_head(last_state).astype(mx.float32))[:, None]
    for _ in range(1, model.args.audio_num_codebooks):
        logits = depth_logits(model, last_state, codes)[:, -1]
        codes = mx.concatenate([codes, pick_depth(logits.astype(mx.float32))[:, None]], axis=1)
    return codes


def generate_csm(
    model: Any,
    input_ids: Any = None,
    attention_mask: Any = None,
    input_values: Any = None,
    input_values_cutoffs: Any = None,
    max_new_tokens: Optional[int] = None,
    output_audio: bool = False,
    **kwargs: Any,
) -> Any:
    """The generated frames as transformers returns them ((batch, frames, codebooks) torch ids), or their audio."""
    import torch
    from mlx_audio.lm.models.cache import make_prompt_cache

    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if input_values is not None:
        batch.update(input_values=input_values, input_values_cutoffs=input_values_cutoffs)
    if np.asarray(input_ids.shape)[0] != 1:
        raise NotImplementedError("CSM generation on MLX takes one prompt at a time; call generate once per prompt")
    config, generation = model.config, model.generation_config
    pick, pick_depth = _picker(kwargs, generation, ""), _picker(kwargs, generation, DEPTH_PREFIX)
    if kwargs:
        raise NotImplementedError(
            f"model.generate on a CSM model on MLX does not honour {', '.join(sorted(kwargs))}: it samples each "
            f"frame with {', '.join(SAMPLING)} and their {DEPTH_PREFIX} twins, for max_new_tokens frames"
        )
    frames, kept, _ = prompt_frames(batch, config, model.codec_model)
    length = kept_length(batch, len(frames))
    limit = max_new_tokens or getattr(generation, "max_new_tokens", None) or 125
    cache = make_prompt_cache(model.backbone)
    step, step_kept = mx.array(frames[None, :length]), mx.array(kept[None, :length])
    generated = []
    for _ in range(int(limit)):
        state = backbone_states(model, step, step_kept, cache)[:, -1]
        codes = _frame(model, state, pick, pick_depth)
        generated.append(np.array(codes[0]))
        if (generated[-1][:-1] == config.codebook_eos_token_id).all():
            break
        step = mx.concatenate([codes, mx.zeros((1, 1), dtype=codes.dtype)], axis=1)[:, None]
        step_kept = mx.array(~np.eye(config.num_codebooks + 1, dtype=bool)[config.num_codebooks])[None, None]
    sequences = torch.from_numpy(np.stack(generated)[None].astype(np.int64))
    if not output_audio:
        return sequences
    return [_decode(model, frames_of_one) for frames_of_one in sequences]


def _decode(model: Any, codes: Any) -> Any:
    """Mimi's audio for one prompt's codes, cut at the first all-eos frame (transformers' `output_audio`)."""
    import torch

    codes = codes.numpy()
    ended = np.nonzero((codes == model.config.codebook_eos_token_id).all(axis=-1))[0]
    return torch.from_numpy(model.codec_model.decode(codes[: ended[0]] if len(ended) else codes))
