# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""TRL trainers whose config has `dataset_num_proc`: their dataset preparation runs inside `sized_maps`.

Wrapping the preparation step (trl 1.16: `_prepare_dataset`) and hooking `Dataset.map` only inside it is the
one mechanism that sees every map TRL runs with that dataset's rows and mapped function, without copying TRL's
preparation code. A trainer without that method (a newer trl renamed it) gets a loud warning, and its whole
`__init__` runs inside the scope instead, so its maps are still never a Pool(1).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from types import ModuleType
from typing import Any, Dict, List

import unsloth_num_proc

from .map_scope import sized_maps

PREPARATION_METHOD = "_prepare_dataset"
TRAINER_SUFFIX = "Trainer"
# The trl release these patches were written and checked against, named when one of them fails.
WRITTEN_AGAINST_TRL = "1.16.0"
WRAPPED_MARKER = "__unsloth_sized_preparation__"


class PreparationMethodMissing(RuntimeWarning):
    """A TRL trainer no longer has the dataset-preparation method unsloth wraps."""


def _arguments(signature: inspect.Signature, self: Any, args: tuple, kwargs: dict, *names: str) -> List[Any]:
    """Each call argument in `names`, else the trainer's attribute of that name (set once `__init__` has run)."""
    try:
        given = signature.bind(self, *args, **kwargs).arguments
    except TypeError:
        given = {}
    return [given[name] if name in given else getattr(self, name, None) for name in names]


def _wrap(cls: type, method_name: str) -> None:
    original = cls.__dict__[method_name]
    if getattr(original, WRAPPED_MARKER, False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        config, processing_class = _arguments(signature, self, args, kwargs, "args", "processing_class")
        with sized_maps(unsloth_num_proc.map_request(config), weight=processing_class):
            return original(self, *args, **kwargs)

    setattr(wrapper, WRAPPED_MARKER, True)
    setattr(cls, method_name, wrapper)


def patch_trainer_classes(trl: ModuleType, configs: Dict[str, type], *, expect_preparation: bool = True) -> List[str]:
    """Wrap each trainer paired with a patched config (`SFTConfig` -> `SFTTrainer`); returns the names wrapped.

    `expect_preparation=False` is for trl's experimental trainers, which (in 1.16) prepare data in `__init__`.
    """
    wrapped = []
    for _family, config_class in sorted(configs.items()):
        name = config_class.__name__[: -len("Config")] + TRAINER_SUFFIX
        try:
            cls = getattr(trl, name)
        except Exception:
            continue  # a config without an exported trainer has no preparation step to size
        owner = next((klass for klass in cls.__mro__ if PREPARATION_METHOD in klass.__dict__), None)
        if owner is None and not expect_preparation:
            _wrap(cls, "__init__")
        elif owner is None:
            warnings.warn(
                f"trl {getattr(trl, '__version__', '?')}: {name} has no {PREPARATION_METHOD} (unsloth was written "
                f"against trl {WRITTEN_AGAINST_TRL}); its whole __init__ now sizes its dataset maps instead",
                PreparationMethodMissing,
                stacklevel=2,
            )
            _wrap(cls, "__init__")
        else:
            _wrap(owner, PREPARATION_METHOD)
        wrapped.append(name)
    return wrapped
