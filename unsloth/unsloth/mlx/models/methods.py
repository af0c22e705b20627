# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The Hugging Face methods notebooks call on a loaded model and its tokenizer: `model.generate` and the Hub pushes.

The model keeps its tokenizer, so `generate` stops at the tokenizer's current EOS (which `get_chat_template` may
have moved to the turn end) as well as the model's own, and pads finished rows with its pad token. It also carries
the attributes notebooks read: `model.config` (the Hugging Face config) and `model.device`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MethodType
from typing import Any, Callable, List, Optional

from ..chat.parts import refuse_unseen_parts
from . import hub
from .generation import generate, read_generation_config

TOKENIZER_ATTRIBUTE = "unsloth_tokenizer"
# Notebooks move inputs with `.to(model.device)`; MLX shares memory with the host, and moves to "cuda" are no-ops here.
MODEL_DEVICE = "cuda"
# What a higher layer teaches every loaded model (compat's torch manners), registered there: layers import downwards.
_MODEL_HABITS: List[Callable[[Any], None]] = []


def register_model_habit(habit: Callable[[Any], None]) -> None:
    if habit not in _MODEL_HABITS:
        _MODEL_HABITS.append(habit)


def apply_model_habits(model: Any) -> None:
    """Run every registered habit on a freshly loaded model (text or vision)."""
    for habit in _MODEL_HABITS:
        habit(model)


def hugging_face_config(folder: Optional[str], name_or_path: Optional[str]) -> Any:
    """The model's config.json as a transformers config (its own class when transformers knows the family)."""
    from transformers import AutoConfig, PretrainedConfig

    if not folder or not (Path(folder) / "config.json").is_file():
        return None
    try:
        config = AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, OSError):
        config = PretrainedConfig.from_json_file(str(Path(folder) / "config.json"))
    config.name_or_path = name_or_path or folder
    return config


def _model_defaults(folder: Optional[str]) -> dict:
    """generation_config.json, with config.json's eos_token_id when the former names none (as transformers does)."""
    defaults = dict(read_generation_config(folder))
    if folder and defaults.get("eos_token_id") is None:
        path = Path(folder) / "config.json"
        try:
            eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id") if path.is_file() else None
        except (OSError, ValueError):
            eos = None
        if eos is not None:
            defaults["eos_token_id"] = eos
    return defaults


def _tokenizer_ids(tokenizer: Any) -> tuple:
    eos = getattr(tokenizer, "eos_token_id", None)
    eos_ids = [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]
    return eos_ids, getattr(tokenizer, "pad_token_id", None)


def _ids_chat_template(self: Any, conversation: Any, *args: Any, **kwargs: Any) -> Any:
    """transformers 4's answer: ids, not a dict, unless `return_dict` is asked for (or an assistant mask needs it).
    An image, audio or video part is refused by name whatever template the tokenizer holds (the model's own too)."""
    refuse_unseen_parts(conversation)
    if "return_dict" not in kwargs and not kwargs.get("return_assistant_tokens_mask"):
        kwargs["return_dict"] = False
    return type(self).apply_chat_template(self, conversation, *args, **kwargs)


def prepare_tokenizer(tokenizer: Any) -> None:
    """Give the tokenizer its push, and the 4.x `apply_chat_template` answer the notebooks were written for."""
    tokenizer.push_to_hub = MethodType(hub.tokenizer_push_to_hub, tokenizer)
    # Notebooks (transformers 4.56) take `len(...)` of the tokenized template; transformers 5 returns a dict there.
    tokenizer.apply_chat_template = MethodType(_ids_chat_template, tokenizer)


def attach_methods(model: Any, tokenizer: Any, folder: Optional[str]) -> None:
    """Give `model` `generate` and the pushes, and `tokenizer` its push, bound to each other."""
    defaults = _model_defaults(folder)
    setattr(model, TOKENIZER_ATTRIBUTE, tokenizer)

    def model_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 2:
            raise TypeError("generate takes input_ids and attention_mask positionally; pass the rest by name")
        eos_ids, pad = _tokenizer_ids(getattr(self, TOKENIZER_ATTRIBUTE, None))
        return generate(
            self, *args, model_defaults=defaults, eos_token_ids=eos_ids, fallback_pad_token_id=pad, **kwargs
        )

    model.generate = MethodType(model_generate, model)
    model.push_to_hub = MethodType(hub.model_push_to_hub, model)
    model.push_to_hub_merged = MethodType(hub.push_to_hub_merged, model)
    model.push_to_hub_gguf = MethodType(hub.push_to_hub_gguf, model)
    if getattr(model, "config", None) is None:
        model.config = hugging_face_config(folder, getattr(model, "unsloth_base_model", None))
    model.device = MODEL_DEVICE
    if tokenizer is not None:
        prepare_tokenizer(tokenizer)
    apply_model_habits(model)


def rebind_tokenizer(model: Any, tokenizer: Any) -> None:
    """Make `tokenizer` the one `model.generate` reads, and give it its push."""
    setattr(model, TOKENIZER_ATTRIBUTE, tokenizer)
    prepare_tokenizer(tokenizer)
