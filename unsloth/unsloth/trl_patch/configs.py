# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""TRL's config classes with a `dataset_num_proc` field: found in trl's exports, each `__post_init__` wrapped.

The wrapped `__post_init__` resolves `dataset_num_proc` through the policy in the map encoding (None for
in-process, never 1: the value reaches `map()` in TRL and in user code) and records whether the request was
auto, so map sites can ask again with rows.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from types import ModuleType
from typing import Any, Dict

import unsloth_num_proc

FIELD = "dataset_num_proc"
CONFIG_SUFFIX = "Config"
WRAPPED_MARKER = "__unsloth_wraps_post_init__"


def family_of(config_name: str) -> str:
    """`SFTConfig` -> `sft`: the family a TRL config name belongs to."""
    return config_name[: -len(CONFIG_SUFFIX)].lower()


def exported_names(trl: ModuleType) -> list:
    """Every public name `trl` exports, including the ones its lazy module has not loaded yet."""
    names = set(getattr(trl, "__all__", ()) or ())
    for group in (getattr(trl, "_import_structure", None) or {}).values():
        names.update(group)
    return sorted(name for name in names if not name.startswith("_"))


def _wrap_post_init(cls: type) -> None:
    original = cls.__dict__.get("__post_init__") or getattr(cls, "__post_init__", None)
    if original is None or getattr(original, WRAPPED_MARKER, False):
        return

    @functools.wraps(original)
    def __post_init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        # A subclass's __post_init__ calls its parent's; only the outermost call resolves.
        outermost = getattr(type(self), "__post_init__", None)
        if outermost is not __post_init__ and getattr(outermost, WRAPPED_MARKER, False):
            return
        requested = getattr(self, FIELD, None)
        setattr(self, FIELD, unsloth_num_proc.map_num_proc(requested))
        unsloth_num_proc.record_intent(self, requested)

    setattr(__post_init__, WRAPPED_MARKER, True)
    setattr(cls, "__post_init__", __post_init__)  # noqa: B010  (mypy refuses a method assigned on `type`)


def patch_config_classes(trl: ModuleType) -> Dict[str, type]:
    """Wrap every exported config class that has a `dataset_num_proc` field; returns them by family."""
    found: Dict[str, type] = {}
    for name in exported_names(trl):
        if not name.endswith(CONFIG_SUFFIX):
            continue
        try:
            cls = getattr(trl, name)
        except Exception as error:  # an optional dependency of one config must not stop the others
            warnings.warn(f"unsloth skipped trl.{name}: {error!r}", RuntimeWarning, stacklevel=2)
            continue
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        if FIELD not in {item.name for item in dataclasses.fields(cls)}:
            continue
        _wrap_post_init(cls)
        found[family_of(name)] = cls
    return found
