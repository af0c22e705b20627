# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The base of the MLX preference / RL configs: `UnslothTrainingArguments` plus one table of method keywords.

A method config (DPO, ORPO, GRPO) names its own keywords with TRL's defaults in `METHOD_KEYWORDS`; they are taken
out of the call before the shared arguments are translated and kept as attributes. `ACCEPTED_AT_DEFAULT` lists the
TRL keywords a method does not honour: given at their default they are kept, given anything else they are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Dict, Tuple

from ..training.arguments import UnslothTrainingArguments, foreign_keywords, requested_values

# TRL's method configs train with this rate unless told otherwise (HF's TrainingArguments would use 5e-5).
METHOD_LEARNING_RATE = 1e-6


class RLTrainingArguments(UnslothTrainingArguments):
    """`UnslothTrainingArguments` that also keep a method's own keywords (TRL's names and defaults)."""

    METHOD_KEYWORDS: ClassVar[Dict[str, Any]] = {}
    ACCEPTED_AT_DEFAULT: ClassVar[Dict[str, Tuple[Any, ...]]] = {}
    DEFAULT_LEARNING_RATE: ClassVar[float] = METHOD_LEARNING_RATE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        requested = requested_values(args, kwargs)
        owner = type(self).__name__
        method = {name: requested.pop(name) for name in list(requested) if name in self.METHOD_KEYWORDS}
        refused = []
        for name in [name for name in requested if name in self.ACCEPTED_AT_DEFAULT]:
            value = requested.pop(name)
            if not any(
                value is quiet or (type(value) is type(quiet) and value == quiet)
                for quiet in self.ACCEPTED_AT_DEFAULT[name]
            ):
                refused.append(f"{name}={value!r}")
            method[name] = value
        if refused:
            raise NotImplementedError(
                f"{owner} cannot train with {', '.join(refused)} on MLX; leave "
                f"{'it' if len(refused) == 1 else 'them'} at the default"
            )
        requested.setdefault("learning_rate", self.DEFAULT_LEARNING_RATE)
        super().__init__(requested)
        for name, default in {**self.METHOD_KEYWORDS, **{k: v[0] for k, v in self.ACCEPTED_AT_DEFAULT.items()}}.items():
            setattr(self, name, method.get(name, default))
        self.check_method_keywords()

    def check_method_keywords(self) -> None:
        """ValueError naming a method keyword with an impossible value; a subclass adds its own checks."""

    def method_values(self) -> Dict[str, Any]:
        """The method keywords as set on this object."""
        names = [*self.METHOD_KEYWORDS, *self.ACCEPTED_AT_DEFAULT]
        return {name: getattr(self, name) for name in names}


def method_arguments(kind: type, args: Any) -> RLTrainingArguments:
    """`args` as the method config `kind`: ours as is, None as the defaults, a dict or TRL's own config converted."""
    if isinstance(args, kind):
        return args
    if args is None:
        return kind(output_dir="trainer_output")
    if isinstance(args, Mapping):
        return kind(dict(args))
    if isinstance(args, UnslothTrainingArguments):
        values = {**args.to_dict(), **getattr(args, "method_values", dict)()}
        return kind(values)
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return kind(foreign_keywords(args))
    raise TypeError(f"args must be a {kind.__name__}, a dict or TRL's config, got {type(args).__name__}")
