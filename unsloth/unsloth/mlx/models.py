# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastLanguageModel` on MLX: load a local model folder through the zoo's loader and put LoRA on it.

Keywords a CUDA notebook passes that only steer CUDA are accepted with one warning; keywords that would load or
adapt a different model than MLX can (4-bit, DoRA, LoftQ, extra trained modules) are refused by name.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Optional, Sequence, Tuple

import mlx.core as mx

from unsloth_zoo.mlx.checkpoint import save_model_files
from unsloth_zoo.mlx.loading import load_model
from unsloth_zoo.mlx.lora import DEFAULT_TARGETS, apply_lora

from .gguf import DEFAULT_QUANTIZATION_METHOD, save_pretrained_gguf
from .keywords import carries_value
from .names import normalised_name
from .trainer_config import MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, model_context_limit

logger = logging.getLogger(__name__)

DEFAULT_MAX_SEQ_LENGTH = 2048
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
_OFF = (None, False)

LOAD_INERT = {
    "token": (None,),
    "device_map": (None, "sequential", "auto"),
    "trust_remote_code": _OFF,
    "attn_implementation": (None,),
    "use_gradient_checkpointing": (None, False, True, "unsloth"),
    "local_files_only": (None, False, True),
    "cache_dir": (None,),
    "use_exact_model_name": _OFF,
    "gpu_memory_utilization": (None,),
    "max_lora_rank": (None,),
    "disable_log_stats": (None, False, True),
    "random_state": (None,),
    "load_in_16bit": (None, False, True),
}
LOAD_DEFAULT_ONLY = {
    "load_in_4bit": _OFF,
    "load_in_8bit": _OFF,
    "fast_inference": _OFF,
    "rope_scaling": (None,),
    "revision": (None,),
    "resize_model_vocab": (None,),
    "float8_kv_cache": _OFF,
    "fix_tokenizer": (None, True),
}
PEFT_INERT = {
    "use_gradient_checkpointing": (None, False, True, "unsloth"),
    "temporary_location": (None,),
}
PEFT_DEFAULT_ONLY = {
    "bias": (None, "none"),
    "loftq_config": (None, {}),
    "modules_to_save": (None,),
    "init_lora_weights": (None, True),
    "use_dora": _OFF,
    "layers_to_transform": (None,),
    "layers_pattern": (None,),
    "rank_pattern": (None, {}),
    "alpha_pattern": (None, {}),
}


def _check_keywords(owner: str, given: Dict[str, Any], inert: Dict[str, Tuple], default_only: Dict[str, Tuple]) -> None:
    """Refuse unknown and changed default-only keywords, all named at once; one warning names inert ones set."""
    unknown = sorted(set(given) - set(inert) - set(default_only))
    if unknown:
        raise NotImplementedError(f"{owner} on MLX does not support {', '.join(unknown)}")
    changed = [
        f"{name}={given[name]!r}"
        for name in sorted(set(given) & set(default_only))
        if carries_value(given[name], default_only[name])
    ]
    if changed:
        raise NotImplementedError(
            f"{owner} on MLX cannot honour {', '.join(changed)}; leave them at the default "
            "(MLX trains 16/32-bit LoRA or full fine-tunes)"
        )
    ignored = [name for name in given if name in inert and carries_value(given[name], inert[name])]
    if ignored:
        warnings.warn(
            f"{owner}: {', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect on MLX and "
            f"{'is' if len(ignored) == 1 else 'are'} ignored",
            RuntimeWarning,
            stacklevel=3,
        )


def _dtype(value: Any) -> Optional[Any]:
    if value is None:
        return None
    name = normalised_name(value)
    if name not in DTYPES:
        raise ValueError(f"dtype={value!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _clamped_length(model: Any, requested: Optional[int]) -> int:
    limit = model_context_limit(model)
    length = DEFAULT_MAX_SEQ_LENGTH if requested is None else int(requested)
    if limit is not None and length > limit:
        if requested is not None:
            logger.warning(
                "max_seq_length=%d is longer than the model's maximum of %d positions; using %d", length, limit, limit
            )
        length = limit
    return length


def _save_pretrained(model: Any, save_directory: str | Path, tokenizer: Any = None) -> None:
    """Adapters (with their mlx_lm config) for a LoRA model, all weights otherwise."""
    save_model_files(Path(save_directory), model, tokenizer)


def _save_pretrained_gguf(
    model: Any, save_directory: str | Path, tokenizer: Any, quantization_method: Any = DEFAULT_QUANTIZATION_METHOD
) -> Any:
    return save_pretrained_gguf(model, save_directory, tokenizer, quantization_method)


class FastLanguageModel:
    @staticmethod
    def from_pretrained(
        model_name: str | Path,
        max_seq_length: Optional[int] = None,
        dtype: Any = None,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        """The model in the local folder `model_name` and its Hugging Face tokenizer; nothing is downloaded.

        `full_finetuning` needs no switch here: a model that never gets LoRA trains every weight.
        """
        _check_keywords("FastLanguageModel.from_pretrained", kwargs, LOAD_INERT, LOAD_DEFAULT_ONLY)
        model, wrapper = load_model(model_name)
        chosen = _dtype(dtype)
        if chosen is not None:
            model.set_dtype(chosen)
        setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, _clamped_length(model, max_seq_length))
        model.save_pretrained = MethodType(_save_pretrained, model)
        model.save_pretrained_gguf = MethodType(_save_pretrained_gguf, model)
        # mlx_lm wraps the tokenizer for streaming decode; notebooks call the Hugging Face tokenizer inside directly.
        tokenizer = getattr(wrapper, "_tokenizer", wrapper)
        return model, tokenizer

    @staticmethod
    def get_peft_model(
        model: Any,
        r: int = 16,
        target_modules: Sequence[str] | str = DEFAULT_TARGETS,
        lora_alpha: float = 16,
        lora_dropout: float = 0.0,
        random_state: int = 3407,
        use_rslora: bool = False,
        max_seq_length: Optional[int] = None,
        **kwargs: Any,
    ) -> Any:
        """LoRA on the model in place (the model is returned, as CUDA notebooks reassign it)."""
        _check_keywords("FastLanguageModel.get_peft_model", kwargs, PEFT_INERT, PEFT_DEFAULT_ONLY)
        targets = DEFAULT_TARGETS if target_modules == "all-linear" else tuple(target_modules)
        # rsLoRA scales by alpha / sqrt(r) instead of alpha / r; the backend divides by r, so alpha carries sqrt(r).
        alpha = lora_alpha * math.sqrt(r) if use_rslora else lora_alpha
        mx.random.seed(int(random_state))
        apply_lora(model, rank=r, alpha=alpha, dropout=lora_dropout, target_modules=targets)
        if max_seq_length is not None:
            setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, _clamped_length(model, max_seq_length))
        return model

    @staticmethod
    def for_inference(model: Any) -> Any:
        model.eval()
        return model

    @staticmethod
    def for_training(model: Any, use_gradient_checkpointing: Any = True) -> Any:
        model.train()
        return model
