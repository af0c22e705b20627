# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`from trl import SFTTrainer, SFTConfig` on MLX: an installed `trl` patched in place, or a stand-in package.

`SFTTrainer` becomes `UnslothTrainer` and `SFTConfig` the MLX arguments with TRL's three-epoch default. Every other
trainer `trl` lists becomes a stub that refuses to build; the list is read from `trl.__all__`, never by touching
the names, since `trl` imports each trainer's module (and with it torch) on first access. An installed `trl` keeps
its whole `__all__` while torch is installed; without torch its `__all__` lists, once first read, only the names
that load, so `from trl import *` works where without unsloth it would fail on the first name needing torch.
"""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType
from typing import Any, Dict, List

from ..training.arguments import UnslothTrainingArguments
from ..training.trainer import UnslothTrainer

PATCHED_MARK = "__unsloth_mlx_patched__"
STAND_IN_MARK = "__unsloth_mlx_stand_in__"
STAND_IN_VERSION = "0+unsloth.mlx.stand.in"
_LISTED = "__unsloth_mlx_listed__"
_LOADABLE = "__unsloth_mlx_loadable__"
# The trainers a stand-in `trl` names when the real one is absent (what recent TRL releases ship).
KNOWN_TRL_TRAINERS = (
    "BCOTrainer",
    "CPOTrainer",
    "DPOTrainer",
    "GKDTrainer",
    "GRPOTrainer",
    "IterativeSFTTrainer",
    "KTOTrainer",
    "NashMDTrainer",
    "OnlineDPOTrainer",
    "ORPOTrainer",
    "PPOTrainer",
    "PRMTrainer",
    "RewardTrainer",
    "RLOOTrainer",
    "XPOTrainer",
)


class SFTConfig(UnslothTrainingArguments):
    """TRL's `SFTConfig` on MLX: like `UnslothTrainingArguments`, but three epochs when no length is given."""

    epochs_when_length_unset = 3


@functools.lru_cache(maxsize=None)
def unsupported_trainer(name: str) -> type:
    """A class named `name` that refuses to build; one class per name, so patching twice changes nothing."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"{name} is not available on MLX: only SFT training (SFTTrainer / UnslothTrainer) runs on the MLX backend"
        )

    return type(
        name, (), {"__init__": refuse, "__module__": "trl", "__doc__": f"{name} stand-in: refuses to build on MLX."}
    )


def _other_trainers(names: List[str]) -> List[str]:
    return [name for name in names if name.endswith("Trainer") and name != "SFTTrainer"]


def _install(module: ModuleType, trainers: List[str], listed: List[str]) -> None:
    for name in trainers:
        setattr(module, name, unsupported_trainer(name))
    module.SFTTrainer = UnslothTrainer
    module.SFTConfig = SFTConfig
    module.__all__ = [*listed, *(name for name in ("SFTConfig", "SFTTrainer", *trainers) if name not in listed)]


def _loads(module: ModuleType, name: str) -> bool:
    try:
        getattr(module, name)
    except Exception:
        return False
    return True


def _read_all(module: ModuleType) -> List[str]:
    names = vars(module)
    if _LOADABLE not in names:
        names[_LOADABLE] = [name for name in names[_LISTED] if _loads(module, name)]
    return names[_LOADABLE]


def _write_all(module: ModuleType, value: List[str]) -> None:
    vars(module)[_LISTED] = list(value)
    vars(module).pop(_LOADABLE, None)


_LISTING_KINDS: Dict[type, type] = {}


def _listing_what_loads(kind: type) -> type:
    """A subclass of trl's module type whose `__all__` is worked out on first read, as `from trl import *` reads it."""
    if kind not in _LISTING_KINDS:
        _LISTING_KINDS[kind] = type(kind.__name__, (kind,), {"__all__": property(_read_all, _write_all)})
    return _LISTING_KINDS[kind]


def patch_trl(module: ModuleType) -> None:
    """Patch an imported `trl` in place, keeping every name it lists that loads; applying it again leaves the same
    objects."""
    listed = list(getattr(module, _LISTED, None) or vars(module).get("__all__", ()))
    if importlib.util.find_spec("torch") is None and _LISTED not in vars(module):
        vars(module).pop("__all__", None)
        vars(module)[_LISTED] = listed
        module.__class__ = _listing_what_loads(type(module))
    _install(module, _other_trainers(listed), listed)
    setattr(module, PATCHED_MARK, True)


def fill_stand_in(module: ModuleType) -> None:
    """Make an empty module the `trl` stand-in used when `trl` is not installed."""
    module.__version__ = STAND_IN_VERSION
    module.__path__ = []
    _install(module, list(KNOWN_TRL_TRAINERS), [])
    setattr(module, STAND_IN_MARK, True)
