# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`UnslothTrainingArguments`: CUDA notebooks' training keywords, translated into the MLX backend's config.

Unknown keywords are refused before anything else happens; keywords that only steer CUDA are accepted with one
warning; everything else is renamed, unwrapped and converted so the backend trains what the notebook asked for.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple

from unsloth_zoo.mlx.config import MLXTrainingConfig

from .keywords import ALIASES, DEFAULT_ONLY_KEYWORDS, INERT_KEYWORDS, carries_value, plain_value
from .names import mlx_optimizer, mlx_schedule

BACKEND_FIELDS = frozenset(MLXTrainingConfig.__dataclass_fields__)
SAMPLING_STRATEGIES = {"random": None, "sequential": "sequential"}
SAMPLING_KEYWORD = "train_sampling_strategy"
# Keywords the public trainer honours itself, kept as attributes of the arguments (not backend config fields).
TRAINER_KEYWORDS = frozenset({"dataset_kwargs", "embedding_learning_rate", "preserve_dataset_order"})
# Carried from one arguments object to the trainer's own copy (rebuilt from the backend fields), unless the
# trainer call itself passes one of the keywords that set it.
CARRIED_ATTRIBUTES = {
    "skip_prepare_dataset": ("dataset_kwargs",),
    "embedding_learning_rate": ("embedding_learning_rate",),
    "eval_strategy_unset": ("eval_strategy", "evaluation_strategy", "eval_steps"),
}
KNOWN_KEYWORDS = (
    BACKEND_FIELDS
    | set(ALIASES)
    | set(INERT_KEYWORDS)
    | set(DEFAULT_ONLY_KEYWORDS)
    | {SAMPLING_KEYWORD}
    | TRAINER_KEYWORDS
)
SUPPORTED_DATASET_KWARGS = frozenset({"skip_prepare_dataset"})


class Translation(NamedTuple):
    values: Dict[str, Any]
    ignored: List[str]
    max_seq_length_source: Optional[str]
    skip_prepare_dataset: bool = False
    embedding_learning_rate: Optional[float] = None


def _trainer_keywords(requested: Mapping[str, Any]) -> Tuple[bool, Optional[float], bool]:
    """(skip_prepare_dataset, embedding_learning_rate, preserve_dataset_order), refusing dataset_kwargs MLX ignores."""
    dataset_kwargs = dict(requested.get("dataset_kwargs") or {})
    unsupported = sorted(set(dataset_kwargs) - SUPPORTED_DATASET_KWARGS)
    if unsupported:
        raise NotImplementedError(
            f"dataset_kwargs={{{', '.join(repr(key) for key in unsupported)}: ...}} is not supported on MLX; "
            "only skip_prepare_dataset is (pass an already tokenized dataset with input_ids)"
        )
    rate = requested.get("embedding_learning_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
        raise ValueError(f"embedding_learning_rate must be a non-negative number, got {rate!r}")
    return (
        bool(dataset_kwargs.get("skip_prepare_dataset", False)),
        None if rate is None else float(rate),
        bool(plain_value(requested.get("preserve_dataset_order"))),
    )


def requested_values(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Keywords, one dict of them, or one path taken as `output_dir` (with or without more keywords)."""
    if not args:
        return dict(kwargs)
    if len(args) > 1:
        raise TypeError(
            "UnslothTrainingArguments takes keywords, one dict, or one output_dir path; got several positionals"
        )
    (first,) = args
    if isinstance(first, Mapping):
        given = dict(first)
    elif isinstance(first, (str, os.PathLike)):
        given = {"output_dir": os.fspath(first)}
    else:
        raise TypeError(
            f"UnslothTrainingArguments takes a dict or an output_dir path positionally, got {type(first).__name__}"
        )
    clashes = sorted(set(given) & set(kwargs))
    if clashes:
        raise TypeError(f"UnslothTrainingArguments got {', '.join(clashes)} both positionally and as keywords")
    return {**given, **kwargs}


def refuse_unsupported(requested: Mapping[str, Any]) -> None:
    """NotImplementedError naming every keyword this backend cannot honour; run first, before any conversion."""
    unknown = sorted(set(requested) - KNOWN_KEYWORDS)
    if unknown:
        raise NotImplementedError(
            f"UnslothTrainingArguments does not support {', '.join(unknown)} on MLX; remove "
            f"{'it' if len(unknown) == 1 else 'them'}, since nothing the MLX trainer does would honour the request"
        )
    changed = [
        f"{name}={requested[name]!r}"
        for name in sorted(set(requested) & set(DEFAULT_ONLY_KEYWORDS))
        if carries_value(requested[name], DEFAULT_ONLY_KEYWORDS[name])
    ]
    sampling = plain_value(requested.get(SAMPLING_KEYWORD))
    if sampling is not None and sampling not in SAMPLING_STRATEGIES:
        changed.append(f"{SAMPLING_KEYWORD}={requested[SAMPLING_KEYWORD]!r}")
    if changed:
        raise NotImplementedError(
            f"UnslothTrainingArguments cannot train with {', '.join(changed)} on MLX; leave "
            f"{'it' if len(changed) == 1 else 'them'} at the default, since the MLX trainer would train differently"
        )


def _resolve_aliases(requested: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """Rename aliases to backend fields (the backend's own name wins); also say where max_seq_length came from."""
    values = dict(requested)
    source = "max_seq_length" if values.get("max_seq_length") is not None else None
    for alias, canonical in ALIASES.items():
        if alias not in values:
            continue
        aliased = values.pop(alias)
        if values.get(canonical) is None:
            values[canonical] = aliased
            if canonical == "max_seq_length" and aliased is not None:
                source = alias
    return values, source


def _warmup(values: Dict[str, Any]) -> None:
    """An explicit positive warmup_steps wins; else warmup_ratio becomes steps against a known max_steps.

    In epoch mode the ratio is left for the backend, which applies it to the real total at train time.
    """
    steps = values.get("warmup_steps")
    ratio = values.get("warmup_ratio") or 0
    if steps is not None and steps > 0:
        return
    if ratio > 0:
        max_steps = values.get("max_steps")
        values["warmup_steps"] = math.ceil(max_steps * ratio) if max_steps is not None and max_steps > 0 else 0


def translate(requested: Dict[str, Any], epochs_when_length_unset: Optional[int] = None) -> Translation:
    """Backend config values for a notebook's keywords, the CUDA-only ones that asked for something, and where
    max_seq_length came from."""
    refuse_unsupported(requested)
    skip_prepare, embedding_rate, preserve_order = _trainer_keywords(requested)
    ignored = [
        name for name in requested if name in INERT_KEYWORDS and carries_value(requested[name], INERT_KEYWORDS[name])
    ]
    sampling = plain_value(requested.get(SAMPLING_KEYWORD))
    values, source = _resolve_aliases(
        {name: value for name, value in requested.items() if name in BACKEND_FIELDS or name in ALIASES}
    )
    if SAMPLING_STRATEGIES.get(sampling) and "dataset_order" not in values:
        values["dataset_order"] = SAMPLING_STRATEGIES[sampling]
    if preserve_order and "dataset_order" not in values:
        values["dataset_order"] = "sequential"
    epochs = values.get("num_train_epochs")
    if isinstance(epochs, float) and epochs.is_integer():
        values["num_train_epochs"] = int(epochs)
    if epochs_when_length_unset is not None and "max_steps" not in values and "num_train_epochs" not in values:
        values["num_train_epochs"] = epochs_when_length_unset
    if "num_train_epochs" in values and "max_steps" not in values:
        values["max_steps"] = -1
    if "lr_scheduler_type" in values:
        values["lr_scheduler_type"] = mlx_schedule(values["lr_scheduler_type"])
    if "optim" in values:
        values["optim"] = mlx_optimizer(values["optim"])
    if values.get("pad_to_multiple_of") == "auto":
        values["pad_to_multiple_of"] = None
    _warmup(values)
    # Public defaults that differ from the backend's, as CUDA Unsloth's do: the chat template owns the EOS.
    values.setdefault("append_eos", False)
    values.setdefault("grad_clip_mode", "global_norm")
    values.setdefault("max_grad_norm", 1.0)
    # Left open so the trainer can choose: the model's own max_seq_length, then max_length, then 1024.
    values.setdefault("max_seq_length", None)
    return Translation(values, ignored, source, skip_prepare, embedding_rate)


def warn_ignored(names: List[str], owner: str = "UnslothTrainingArguments") -> None:
    if names:
        warnings.warn(
            f"{owner}: {', '.join(names)} {'has' if len(names) == 1 else 'have'} no effect on MLX and "
            f"{'is' if len(names) == 1 else 'are'} ignored "
            "(CUDA, mixed-precision, hub and tracker settings do not change the trained weights)",
            RuntimeWarning,
            stacklevel=3,
        )


class UnslothTrainingArguments(MLXTrainingConfig):
    """The MLX config, built from the keywords a CUDA notebook passes to `TrainingArguments` or `SFTConfig`."""

    # TRL's SFTConfig sets this to 3: the epochs trained when neither max_steps nor num_train_epochs is given.
    epochs_when_length_unset: ClassVar[Optional[int]] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        translation = translate(requested_values(args, kwargs), type(self).epochs_when_length_unset)
        super().__init__(**translation.values)
        self.max_seq_length_source = translation.max_seq_length_source
        self.skip_prepare_dataset = translation.skip_prepare_dataset
        self.embedding_learning_rate = translation.embedding_learning_rate
        warn_ignored(translation.ignored, type(self).__name__)
