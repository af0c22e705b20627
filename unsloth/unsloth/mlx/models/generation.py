# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`model.generate(...)` with Hugging Face's keywords, run by `mlx_lm`'s token loop and samplers.

Prompts come as a torch tensor, a numpy array, nested lists, an mlx array or a `BatchEncoding`; padding is read
from `attention_mask` (left padding, as batched generation wants), and each row is generated from its own unpadded
tokens, so a row's tokens are the ones it would get alone. The answer is the prompt plus the new tokens, as Hugging
Face returns it, in the prompt's own kind (a torch tensor for a torch prompt, numpy otherwise). `generate` takes
the ids and keywords only, so other front ends (vision) can call it with their own model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence

import numpy as np

logger = logging.getLogger(__name__)

# Hugging Face's generation defaults, used when neither the call nor generation_config.json says otherwise.
HF_DEFAULTS = {"max_length": 20, "do_sample": False, "temperature": 1.0, "top_p": 1.0, "top_k": 50, "min_p": None}
SAMPLING_KEYWORDS = ("temperature", "top_p", "top_k", "min_p")
# Keywords that change nothing on MLX: the KV cache is always on, outputs come back as one array.
INERT = {"use_cache", "token_type_ids", "synced_gpus", "position_ids", "cache_implementation"}
# What a processor adds for images, audio and video (pixel_values, image_grid_thw, input_features, ...).
MEDIA_INPUT_PREFIXES = ("pixel_", "image_", "input_features", "audio_", "video_")
# Keywords accepted only at the value that means "off".
DEFAULT_ONLY = {
    "num_beams": (None, 1),
    "num_return_sequences": (None, 1),
    "return_dict_in_generate": (None, False),
    "output_scores": (None, False),
    "output_logits": (None, False),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "assistant_model": (None,),
    "prompt_lookup_num_tokens": (None,),
}


class GenerationInputError(ValueError):
    """A prompt or keyword `generate` cannot run, named in the message."""


@dataclass(frozen=True)
class Settings:
    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: Optional[float]
    eos_token_ids: frozenset
    pad_token_id: int


def _as_rows(values: Any, name: str) -> np.ndarray:
    """A 2-D int64 array from a torch tensor, numpy array, mlx array or (nested) list."""
    if values is None:
        raise GenerationInputError(f"generate needs {name}")
    listed = values.tolist() if hasattr(values, "tolist") else values
    try:
        array = np.asarray(listed, dtype=np.int64)
    except (TypeError, ValueError) as error:
        raise GenerationInputError(f"{name} must be token ids of equal length per row: {error}") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise GenerationInputError(f"{name} must be one row or a batch of rows of token ids, got shape {array.shape}")
    return array


def _unpack(input_ids: Any, attention_mask: Any) -> tuple:
    """`input_ids` may itself be a `BatchEncoding` / dict (transformers 5's `apply_chat_template` returns one)."""
    if hasattr(input_ids, "keys") and "input_ids" in input_ids.keys():
        if attention_mask is None and "attention_mask" in input_ids.keys():
            attention_mask = input_ids["attention_mask"]
        input_ids = input_ids["input_ids"]
    return input_ids, attention_mask


def _unpadded_rows(ids: np.ndarray, mask: Optional[np.ndarray]) -> List[List[int]]:
    if mask is None:
        return [row.tolist() for row in ids]
    if mask.shape != ids.shape:
        raise GenerationInputError(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}")
    rows = []
    for row, keep in zip(ids, mask):
        if keep.any() and not keep[-1]:
            # Hugging Face warns here too: a right-padded prompt would continue from its padding.
            logger.warning("a prompt is right-padded; batched generation wants padding_side='left'")
        tokens = row[keep.astype(bool)].tolist()
        if not tokens:
            raise GenerationInputError("a prompt row has no tokens left once its padding is removed")
        rows.append(tokens)
    return rows


def read_generation_config(folder: Optional[str]) -> dict:
    """The model folder's `generation_config.json`, as Hugging Face reads it for its defaults; {} when absent."""
    if not folder:
        return {}
    path = Path(folder) / "generation_config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def _ids(value: Any) -> frozenset:
    if value is None:
        return frozenset()
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset(int(item) for item in value)
    return frozenset({int(value)})


def _refuse_unknown(kwargs: dict) -> None:
    media = sorted(name for name in kwargs if name.startswith(MEDIA_INPUT_PREFIXES))
    if media:
        raise GenerationInputError(
            f"generate got {', '.join(media)}, but this is a text-only model, which cannot see or hear images, audio "
            "or video: load the checkpoint with FastVisionModel (or FastModel) for multimodal generation"
        )
    unknown = sorted(set(kwargs) - INERT - set(DEFAULT_ONLY))
    if unknown:
        raise GenerationInputError(f"generate on MLX does not take {', '.join(unknown)}")
    changed = [
        f"{k}={kwargs[k]!r}" for k in sorted(set(kwargs) & set(DEFAULT_ONLY)) if kwargs[k] not in DEFAULT_ONLY[k]
    ]
    if changed:
        raise GenerationInputError(
            f"generate on MLX cannot honour {', '.join(changed)}: it samples one sequence per prompt, token by token"
        )


def settle(
    prompt_length: int,
    generation_config: dict,
    eos_token_ids: Iterable[int],
    pad_token_id: Optional[int],
    given: dict,
) -> Settings:
    """The call's keywords over generation_config.json over Hugging Face's defaults."""

    def pick(name: str) -> Any:
        if given.get(name) is not None:
            return given[name]
        if generation_config.get(name) is not None:
            return generation_config[name]
        return HF_DEFAULTS.get(name)

    if given.get("max_new_tokens") is not None:
        max_new = int(given["max_new_tokens"])
    elif given.get("max_length") is not None or generation_config.get("max_new_tokens") is None:
        max_new = int(pick("max_length")) - prompt_length
    else:
        max_new = int(generation_config["max_new_tokens"])
    do_sample = bool(pick("do_sample"))
    if not do_sample:
        set_here = [name for name in SAMPLING_KEYWORDS if given.get(name) is not None]
        if set_here:
            logger.warning(
                "%s set while do_sample is off (the model's generation_config.json does not turn it on): "
                "decoding greedily, as Hugging Face does; pass do_sample=True to sample",
                ", ".join(set_here),
            )
    # The model's own ends and the tokenizer's (get_chat_template may have made the turn end its EOS).
    eos = _ids(given.get("eos_token_id")) or (_ids(generation_config.get("eos_token_id")) | frozenset(eos_token_ids))
    pad = next(
        (v for v in (given.get("pad_token_id"), generation_config.get("pad_token_id"), pad_token_id) if v is not None),
        None,
    )
    if pad is None:
        pad = min(eos) if eos else 0
    penalty = pick("repetition_penalty")
    return Settings(
        max_new_tokens=max(max_new, 0),
        do_sample=do_sample,
        temperature=float(pick("temperature")),
        top_p=float(pick("top_p")),
        top_k=int(pick("top_k") or 0),
        min_p=float(pick("min_p") or 0.0),
        repetition_penalty=None if penalty in (None, 1, 1.0) else float(penalty),
        eos_token_ids=eos,
        pad_token_id=int(pad),
    )


def _sampler(settings: Settings) -> Any:
    from mlx_lm.sample_utils import make_sampler

    if not settings.do_sample or settings.temperature == 0:
        return make_sampler(temp=0.0)
    top_p = settings.top_p if 0 < settings.top_p < 1 else 0.0
    return make_sampler(temp=settings.temperature, top_p=top_p, min_p=settings.min_p, top_k=settings.top_k)


class _HuggingFaceProcessor:
    """A Hugging Face logits processor `(input_ids, scores) -> scores` run on mlx-lm's `(tokens, logits)`.

    It sees a (1, length) batch of the tokens so far and float32 scores, as torch tensors when the prompt came in as
    torch, numpy arrays otherwise.
    """

    def __init__(self, processor: Any, template: Any) -> None:
        self.processor = processor
        self.template = template

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx

        ids = _in_kind_of(self.template, np.asarray(tokens, dtype=np.int64)[None, :])
        scores = _in_kind_of(self.template, np.asarray(logits.astype(mx.float32)).reshape(1, -1))
        changed = self.processor(ids, scores)
        changed = changed.numpy() if hasattr(changed, "numpy") else np.asarray(changed)
        return mx.array(changed.astype(np.float32)).reshape(logits.shape).astype(logits.dtype)


def _logits_processors(settings: Settings, context: int, extra: Sequence[Any] = ()) -> Optional[list]:
    processors = list(extra)
    if settings.repetition_penalty is None:
        return processors or None
    from mlx_lm.sample_utils import make_logits_processors

    # Hugging Face penalises every token seen so far, prompt included.
    penalty = make_logits_processors(repetition_penalty=settings.repetition_penalty, repetition_context_size=context)
    return penalty + processors


def _processor_list(logits_processor: Any, template: Any) -> List[Any]:
    """`logits_processor` (one callable, a list, or a `LogitsProcessorList`) wrapped for mlx-lm."""
    if logits_processor is None:
        return []
    given = (
        [logits_processor]
        if callable(logits_processor) and not isinstance(logits_processor, list)
        else logits_processor
    )
    processors = list(given)
    for processor in processors:
        if not callable(processor):
            raise GenerationInputError(f"logits_processor holds {processor!r}, which is not callable")
    return [_HuggingFaceProcessor(processor, template) for processor in processors]


def _generate_row(
    model: Any, prompt: Sequence[int], settings: Settings, streamer: Any, processors: Sequence[Any] = ()
) -> List[int]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    new: List[int] = []
    if settings.max_new_tokens == 0:
        return new
    steps = generate_step(
        mx.array(prompt),
        model,
        max_tokens=settings.max_new_tokens,
        sampler=_sampler(settings),
        logits_processors=_logits_processors(settings, len(prompt) + settings.max_new_tokens, processors),
    )
    for token, _ in steps:
        token = int(token)
        new.append(token)
        if streamer is not None:
            streamer.put(np.asarray([token], dtype=np.int64))
        if token in settings.eos_token_ids:
            break
    return new


def _in_kind_of(template: Any, array: np.ndarray) -> Any:
    """The answer as the same kind of array the prompt came in (torch only when the prompt was torch)."""
    if type(template).__module__.split(".", 1)[0] == "torch":
        import torch

        return torch.from_numpy(array)
    return array


def generate(
    model: Any,
    input_ids: Any = None,
    attention_mask: Any = None,
    *,
    streamer: Any = None,
    model_defaults: Optional[dict] = None,
    eos_token_ids: Iterable[int] = (),
    fallback_pad_token_id: Optional[int] = None,
    pad_token_id: Optional[int] = None,
    max_new_tokens: Optional[int] = None,
    max_length: Optional[int] = None,
    do_sample: Optional[bool] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
    top_k: Optional[int] = None,
    min_p: Optional[float] = None,
    repetition_penalty: Optional[float] = None,
    eos_token_id: Any = None,
    logits_processor: Any = None,
    **kwargs: Any,
) -> Any:
    """Prompt plus new tokens per row, padded on the right with `pad_token_id` past each row's end.

    `model_defaults` is the model's generation_config.json; `eos_token_ids` and `fallback_pad_token_id` come from
    the tokenizer. The rest are Hugging Face's keywords of the same names.
    """
    _refuse_unknown(kwargs)
    input_ids, attention_mask = _unpack(input_ids, attention_mask)
    ids = _as_rows(input_ids, "input_ids")
    mask = None if attention_mask is None else _as_rows(attention_mask, "attention_mask")
    rows = _unpadded_rows(ids, mask)
    if streamer is not None and len(rows) > 1:
        raise GenerationInputError("a streamer takes one prompt at a time (batch size 1), as in Hugging Face")
    given = {
        "max_new_tokens": max_new_tokens,
        "max_length": max_length,
        "do_sample": do_sample,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "repetition_penalty": repetition_penalty,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
    }
    settings = settle(ids.shape[1], model_defaults or {}, eos_token_ids, fallback_pad_token_id, given)
    processors = _processor_list(logits_processor, input_ids)
    if streamer is not None:
        streamer.put(ids.copy())
    try:
        answers = [_generate_row(model, row, settings, streamer, processors) for row in rows]
    finally:
        if streamer is not None:
            streamer.end()
    width = max((len(answer) for answer in answers), default=0)
    out = np.full((ids.shape[0], ids.shape[1] + width), settings.pad_token_id, dtype=np.int64)
    out[:, : ids.shape[1]] = ids
    for index, answer in enumerate(answers):
        out[index, ids.shape[1] : ids.shape[1] + len(answer)] = answer
    return _in_kind_of(input_ids, out)
