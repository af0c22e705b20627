# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`Seq2SeqTrainingArguments(predict_with_generate=True)` on Whisper: each eval clip transcribed greedily as
transformers' Whisper `generate` does it (the prompt from `generation_config`'s language and task, `max_length` new
tokens at most, the end token dropped), padded as `Seq2SeqTrainer.prediction_step` pads ids and labels."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from .transcribe import greedy_ids

# transformers' GenerationConfig default, used when the model's config leaves max_length unset.
DEFAULT_MAX_LENGTH = 20


def whisper_prompt(settings: Any) -> List[int]:
    """`<|startoftranscript|>`, the language, the task (transcribe unless set) and `<|notimestamps|>`."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    language = getattr(settings, "language", None)
    if language is None:
        raise NotImplementedError(
            "predict_with_generate on MLX needs model.generation_config.language (the notebook sets '<|en|>'): "
            "transformers' Whisper would detect each clip's language first, which is not built on MLX"
        )
    if getattr(settings, "forced_decoder_ids", None) is not None or getattr(settings, "return_timestamps", False):
        raise NotImplementedError(
            "predict_with_generate on MLX builds the prompt from generation_config.language and task; set "
            "model.generation_config.forced_decoder_ids = None and leave return_timestamps off"
        )
    name = language.lower()
    code = TO_LANGUAGE_CODE.get(name, name)
    token = name if name in settings.lang_to_id else f"<|{code}|>"
    task = getattr(settings, "task", None) or "transcribe"
    start = settings.decoder_start_token_id
    return [start, settings.lang_to_id[token], settings.task_to_id[task], settings.no_timestamps_token_id]


def _pad_id(trainer: Any) -> int:
    """`Seq2SeqTrainer._pad_tensors_to_max_len`'s padding: the processing class's, else the model config's."""
    owner = getattr(trainer, "processing_class", None)
    if owner is not None and hasattr(owner, "pad_token_id"):
        return owner.pad_token_id if owner.pad_token_id is not None else owner.eos_token_id
    return int(trainer.model.config.pad_token_id)


def _padded_to(rows: List[List[int]] | np.ndarray, width: int, fill: int) -> np.ndarray:
    longest = max([width, *(len(row) for row in rows)])
    out = np.full((len(rows), longest), fill, dtype=np.int64)
    for slot, row in enumerate(rows):
        out[slot, : len(row)] = row
    return out


# The generation keywords `trainer.predict(test_dataset, **gen_kwargs)` honours; any other is refused by name.
PREDICT_KEYWORDS = ("max_length", "max_new_tokens", "num_beams")


def _requested(requested: Optional[dict]) -> dict:
    chosen = {name: value for name, value in (requested or {}).items() if value is not None}
    unknown = sorted(set(chosen) - set(PREDICT_KEYWORDS))
    if unknown:
        raise NotImplementedError(
            f"trainer.predict on MLX Whisper takes {', '.join(PREDICT_KEYWORDS)}; it cannot honour {', '.join(unknown)}"
        )
    return chosen


def generated_batch(trainer: Any, mels: np.ndarray, labels: np.ndarray, requested: Optional[dict] = None) -> tuple:
    """One eval batch's generated ids and labels, each padded to the model's generation max_length; `requested`
    (predict's keywords) comes before the training arguments, as in `Seq2SeqTrainer.predict`."""
    args, model = trainer.args, trainer.model
    settings = model.generation_config
    chosen = _requested(requested)
    beams = chosen.get("num_beams", args.generation_num_beams)
    beams = beams if beams is not None else settings.num_beams
    if (beams or 1) > 1 or settings.do_sample:
        raise NotImplementedError(
            f"predict_with_generate on MLX decodes greedily; it cannot honour num_beams={beams} or do_sample=True "
            "(set generation_num_beams=1)"
        )
    prompt = whisper_prompt(settings)
    positions = model.config.max_target_positions
    starts = min(positions // 2 - 1, len(prompt))
    max_length, max_new = chosen.get("max_length"), chosen.get("max_new_tokens")
    if max_length is None and max_new is None:
        max_length, max_new = args.generation_max_length, settings.max_new_tokens
    if max_length is None and max_new is not None:
        new_tokens = min(max_new, positions - len(prompt))
    else:
        length = max_length or settings.max_length or DEFAULT_MAX_LENGTH
        new_tokens = min(length + starts, positions) - len(prompt)
    end, pad = settings.eos_token_id, settings.pad_token_id
    rows = [greedy_ids(model, mel, prompt, end, new_tokens) for mel in mels]
    generated = _padded_to(rows, 0, pad)
    width, fill = settings.max_length or DEFAULT_MAX_LENGTH, _pad_id(trainer)
    return _padded_to(list(generated), width, fill), _padded_to(list(labels), width, fill)
