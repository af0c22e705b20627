# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastModel.from_pretrained` / `get_peft_model` on a Whisper checkpoint, with the notebook's keywords."""

from __future__ import annotations

from pathlib import Path
from types import MethodType
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import mlx.core as mx

from ..models.keywords import check_load_keywords, check_peft_keywords
from ..models.methods import TOKENIZER_ATTRIBUTE
from .csm import CSM_AUTO_MODELS, SOURCE_ATTRIBUTE as CSM_SOURCE, apply_csm_lora, csm_targets, load_csm
from .csm import mlx_weights, save_csm_adapter
from .csm_generation import generate_csm
from .lora import apply_whisper_lora, whisper_targets
from .saving import SpeechSaving, attach_speech_saving, save_whisper_adapter
from .whisper import SOURCE_ATTRIBUTE as WHISPER_SOURCE, load_whisper

WHISPER_AUTO_MODELS = ("WhisperForConditionalGeneration", "AutoModelForSpeechSeq2Seq")
WHISPER_LOAD_USED = ("token", "revision", "whisper_language", "whisper_task", "use_gradient_checkpointing")
WHISPER_PEFT_USED = ("use_gradient_checkpointing",)
CSM_LOAD_USED = ("token", "revision", "use_gradient_checkpointing")


def _mlx_dtype(dtype: Any) -> Optional[Any]:
    """None (the checkpoint's own), an MLX dtype, or torch's / a string of the same name."""
    if dtype is None or isinstance(dtype, mx.Dtype):
        return dtype
    return getattr(mx, str(dtype).rsplit(".", 1)[-1])


def from_pretrained_whisper(
    owner: str,
    folder: str | Path,
    dtype: Any,
    load_in_4bit: Optional[bool],
    load_in_8bit: bool,
    kwargs: Dict[str, Any],
) -> Tuple[Any, Any]:
    """The MLX Whisper and its processor; quantized bases and other auto_model classes are refused by name."""
    auto_model = kwargs.pop("auto_model", None)
    name = getattr(auto_model, "__name__", repr(auto_model))
    if auto_model is not None and name not in WHISPER_AUTO_MODELS:
        raise NotImplementedError(
            f"{owner} on MLX cannot honour auto_model={name}: this checkpoint is 'whisper'; "
            "pass auto_model=WhisperForConditionalGeneration"
        )
    check_load_keywords(owner, kwargs, WHISPER_LOAD_USED)
    if load_in_4bit or load_in_8bit or kwargs.get("load_in_fp8"):
        raise NotImplementedError(
            f"{owner}: a quantized Whisper base is not built on MLX (mlx-audio's Whisper trains in 16 or 32 bits); "
            "pass load_in_4bit=False"
        )
    model, processor = load_whisper(
        folder, kwargs.get("whisper_language"), kwargs.get("whisper_task"), _mlx_dtype(dtype)
    )
    # mlx-audio's `sanitize` is the loader's name mapping, which the merged save runs backwards.
    saving = SpeechSaving("Whisper", getattr(model, WHISPER_SOURCE), model.sanitize)
    attach_speech_saving(model, saving, save_whisper_adapter)
    return model, processor


def _check_auto_model(owner: str, kwargs: Dict[str, Any], family: str, accepted: Sequence[str]) -> None:
    auto_model = kwargs.pop("auto_model", None)
    name = getattr(auto_model, "__name__", repr(auto_model))
    if auto_model is not None and name not in accepted:
        raise NotImplementedError(
            f"{owner} on MLX cannot honour auto_model={name}: this checkpoint is {family!r}; "
            f"pass auto_model={accepted[0]}"
        )


def from_pretrained_csm(
    owner: str,
    folder: str | Path,
    dtype: Any,
    load_in_4bit: Optional[bool],
    load_in_8bit: bool,
    kwargs: Dict[str, Any],
) -> Tuple[Any, Any]:
    """mlx-audio's Sesame model with transformers' Mimi, and the `CsmProcessor`; quantized bases refused by name."""
    _check_auto_model(owner, kwargs, "csm", CSM_AUTO_MODELS)
    check_load_keywords(owner, kwargs, CSM_LOAD_USED)
    if load_in_4bit or load_in_8bit or kwargs.get("load_in_fp8"):
        raise NotImplementedError(
            f"{owner}: a quantized CSM base is not built on MLX (mlx-audio's Sesame model trains in 16 or 32 bits); "
            "pass load_in_4bit=False, as the notebook does"
        )
    model, processor = load_csm(folder, _mlx_dtype(dtype))
    model.generate = MethodType(generate_csm, model)
    attach_speech_saving(model, SpeechSaving("CSM", getattr(model, CSM_SOURCE), mlx_weights), save_csm_adapter)
    # The notebook's `Trainer(model=model, ...)` names no processor; the MLX trainer finds it here.
    setattr(model, TOKENIZER_ATTRIBUTE, processor)
    return model, processor


def _speech_peft_model(
    owner: str,
    model: Any,
    r: int,
    target_modules: Optional[Sequence[str] | str],
    lora_alpha: float,
    kwargs: Dict[str, Any],
    targets_of: Callable[[Any], Sequence[str]],
    apply: Callable[..., Any],
) -> Any:
    """The notebook's `get_peft_model` keywords read once for every speech family, then its own LoRA placement."""
    lora_dropout = kwargs.pop("lora_dropout", 0.0)
    random_state = kwargs.pop("random_state", 3407)
    use_rslora = kwargs.pop("use_rslora", False)
    kwargs.pop("max_seq_length", None)
    check_peft_keywords(owner, kwargs, WHISPER_PEFT_USED)
    return apply(model, targets_of(target_modules), r, lora_alpha, lora_dropout, random_state, bool(use_rslora))


def get_peft_model_csm(owner: str, model: Any, r: int, target_modules: Any, lora_alpha: float, kwargs: Dict) -> Any:
    """LoRA on the backbone's and depth decoder's linears, as PEFT places it on transformers' CSM."""
    return _speech_peft_model(owner, model, r, target_modules, lora_alpha, kwargs, csm_targets, apply_csm_lora)


def get_peft_model_whisper(owner: str, model: Any, r: int, target_modules: Any, lora_alpha: float, kwargs: Dict) -> Any:
    """LoRA as PEFT places it on transformers' Whisper (`task_type=None`, as the notebook must set)."""
    return _speech_peft_model(owner, model, r, target_modules, lora_alpha, kwargs, whisper_targets, apply_whisper_lora)
