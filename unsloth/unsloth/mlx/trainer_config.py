# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The public trainer's own copy of its arguments, whatever the notebook passed, and its context length.

Arguments may be `UnslothTrainingArguments`, the backend's config, a dict, or a Hugging Face / TRL arguments
dataclass; all become `UnslothTrainingArguments` through the same keyword translation, so the same refusals apply.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Dict, Optional

from unsloth_zoo.mlx.config import MLXTrainingConfig

from .arguments import ALIASES, BACKEND_FIELDS, CARRIED_ATTRIBUTES, UnslothTrainingArguments

logger = logging.getLogger(__name__)

FALLBACK_MAX_SEQ_LENGTH = 1024
MODEL_MAX_SEQ_LENGTH_ATTRIBUTE = "max_seq_length"


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def foreign_keywords(args: Any) -> Dict[str, Any]:
    """A Hugging Face / TRL arguments object as keywords: every field the backend knows, plus any other field
    whose value differs from its class default (only those can have been asked for)."""
    keywords = {}
    for field in dataclasses.fields(args):
        if not field.init:
            continue
        value = getattr(args, field.name)
        # Fields the backend shares keep Hugging Face's values, defaults included, so training matches the CUDA run.
        if field.name in BACKEND_FIELDS or field.name in ALIASES or value != _field_default(field):
            keywords[field.name] = value
    return keywords


def _resolved_aliases(keywords: Dict[str, Any]) -> Dict[str, Any]:
    """Trainer-level keywords laid over a full config: an alias must replace the config's value, not lose to it."""
    resolved = dict(keywords)
    for alias, canonical in ALIASES.items():
        if alias in resolved:
            value = resolved.pop(alias)
            if resolved.get(canonical) is None:
                resolved[canonical] = value
    return resolved


def public_config(args: Any, overrides: Dict[str, Any]) -> UnslothTrainingArguments:
    """A fresh `UnslothTrainingArguments` for the trainer: `args` with the trainer-level keywords on top."""
    config = _rebuilt_config(args, overrides)
    for name, keywords in CARRIED_ATTRIBUTES.items():
        if hasattr(args, name) and not any(keyword in overrides for keyword in keywords):
            setattr(config, name, getattr(args, name))
    return config


def _rebuilt_config(args: Any, overrides: Dict[str, Any]) -> UnslothTrainingArguments:
    if args is None or isinstance(args, Mapping):
        return UnslothTrainingArguments({**(args or {}), **overrides})
    if isinstance(args, MLXTrainingConfig):
        kind = type(args) if isinstance(args, UnslothTrainingArguments) else UnslothTrainingArguments
        source = getattr(args, "max_seq_length_source", "max_seq_length")
        config = kind(**{**args.to_dict(), **_resolved_aliases(overrides)})
        if "max_seq_length" not in overrides and "max_length" not in overrides:
            config.max_seq_length_source = source if config.max_seq_length is not None else None
        elif "max_seq_length" not in overrides:
            config.max_seq_length_source = "max_length"
        return config
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return UnslothTrainingArguments({**foreign_keywords(args), **overrides})
    raise TypeError(
        "UnslothTrainer args must be UnslothTrainingArguments, a dict or a TrainingArguments dataclass, "
        f"got {type(args).__name__}"
    )


def model_context_limit(model: Any) -> Optional[int]:
    """The longest sequence the model's positions cover, from its config (mlx_lm keeps it on `model.args`)."""
    limit = getattr(getattr(model, "args", None), "max_position_embeddings", None)
    return int(limit) if limit else None


def resolve_max_seq_length(config: UnslothTrainingArguments, model: Any) -> int:
    """Explicit max_seq_length, else the model's, else the args' max_length, else 1024; never past the length the
    model was loaded for, nor its positions."""
    source = getattr(config, "max_seq_length_source", "max_seq_length")
    explicit = config.max_seq_length if source == "max_seq_length" else None
    from_model = getattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, None)
    from_max_length = config.max_seq_length if source == "max_length" else None
    for origin, value in (
        ("max_seq_length", explicit),
        ("the model's max_seq_length", from_model),
        ("max_length", from_max_length),
    ):
        if value is not None:
            break
    else:
        origin, value = None, FALLBACK_MAX_SEQ_LENGTH
    value = int(value)
    limit = model_context_limit(model)
    # The model was loaded for `from_model` positions (FastLanguageModel's max_seq_length): never train past it.
    if from_model is not None and origin != "the model's max_seq_length":
        limit = int(from_model) if limit is None else min(limit, int(from_model))
    if limit is not None and value > limit:
        if origin is not None:
            logger.warning(
                "%s=%d is longer than the model's maximum of %d positions; training with %d",
                origin,
                value,
                limit,
                limit,
            )
        value = limit
    return value
