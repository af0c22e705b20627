# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`model.generate(**inputs, streamer=..., max_new_tokens=..., temperature=..., min_p=...)` for a vision model on MLX.

`inputs` is what the processor returned for an image and a prompt (`processor(image, text)`); the answer comes back
as Hugging Face's does, the prompt ids followed by the new ids, and a streamer (such as `TextStreamer`) is fed the
prompt and then each new token. Decoding runs through mlx-vlm's loop; sampling keywords it has no use for on MLX
(`use_cache`) are accepted, others that would change the answer are refused.
"""

from __future__ import annotations

from types import MethodType
from typing import Any, Dict, List

import mlx.core as mx
import numpy as np

from .backend import generate_tokens

SAMPLING = ("temperature", "min_p", "top_p", "top_k", "repetition_penalty")
ACCEPTED = ("use_cache", "pad_token_id", "eos_token_id", "do_sample", "return_dict_in_generate")
_INPUTS = ("input_ids", "pixel_values", "attention_mask")


def _eos_ids(model: Any, processor: Any, given: Any) -> List[int]:
    found = given if given is not None else getattr(getattr(model, "config", None), "eos_token_id", None)
    ids = [found] if isinstance(found, int) else list(found or [])
    tokenizer = getattr(processor, "tokenizer", processor)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(int(tokenizer.eos_token_id))
    return sorted(set(int(token) for token in ids))


def _array(value: Any) -> Any:
    """The value as an MLX array, or None when it is not numbers (the caller refuses it by name)."""
    if value is None:
        return None
    numbers = np.asarray(value)
    return mx.array(numbers) if numbers.dtype.kind in "biuf" else None


def vision_generate(model: Any, processor: Any, max_new_tokens: int = 20, streamer: Any = None, **kwargs: Any) -> Any:
    """Prompt ids then new ids, shape (1, n), as a numpy array."""
    inputs = {name: kwargs.pop(name, None) for name in _INPUTS}
    if inputs["input_ids"] is None:
        raise TypeError("generate needs input_ids: pass **processor(image, prompt) as the vision notebooks do")
    sampling: Dict[str, Any] = {name: kwargs.pop(name) for name in SAMPLING if kwargs.get(name) is not None}
    do_sample = kwargs.get("do_sample")
    if do_sample is False:
        sampling["temperature"] = 0.0
    # Hugging Face samples at temperature 1.0 when asked to sample without one; otherwise it decodes greedily.
    sampling.setdefault("temperature", 1.0 if do_sample else 0.0)
    eos = _eos_ids(model, processor, kwargs.get("eos_token_id"))
    extras = {name: _array(kwargs.pop(name)) for name in list(kwargs) if name not in ACCEPTED}
    unknown = [name for name, value in extras.items() if value is None or value.ndim == 0]
    if unknown:
        raise NotImplementedError(f"generate on MLX does not support {', '.join(sorted(unknown))}")
    prompt = np.asarray(inputs["input_ids"])
    if prompt.ndim > 2 or (prompt.ndim == 2 and prompt.shape[0] != 1):
        raise NotImplementedError(f"generate on MLX takes one prompt at a time, got input_ids of shape {prompt.shape}")
    prompt = prompt.reshape(1, -1).astype(np.int32)
    if streamer is not None:
        streamer.put(prompt)
    new: List[int] = []
    for token in generate_tokens(
        model,
        mx.array(prompt),
        _array(inputs["pixel_values"]),
        _array(inputs["attention_mask"]),
        extras,
        int(max_new_tokens),
        sampling,
    ):
        new.append(token)
        if streamer is not None:
            streamer.put(np.asarray([token]))
        if token in eos:
            break
    if streamer is not None:
        streamer.end()
    return np.concatenate([prompt, np.asarray([new], dtype=np.int32).reshape(1, -1)], axis=1)


def attach_generate(model: Any, processor: Any) -> None:
    def generate(self: Any, **kwargs: Any) -> Any:
        return vision_generate(self, processor, **kwargs)

    model.generate = MethodType(generate, model)
