# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`from trl import SFTTrainer, SFTConfig` on MLX: an installed `trl` patched in place, or a stand-in package.

`SFTTrainer` becomes `UnslothTrainer` and `SFTConfig` the MLX arguments with TRL's three-epoch default. Every other
trainer `trl` lists becomes a stub that refuses to build; the list is read from `trl.__all__`, never by touching
the names, since `trl` imports each trainer's module (and with it torch) on first access. An installed `trl` keeps
its whole `__all__`, so `from trl import *` gives what it gives without unsloth (and needs torch as it does there).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, List

from .arguments import UnslothTrainingArguments
from .trainer import UnslothTrainer

PATCHED_MARK = "__unsloth_mlx_patched__"
STAND_IN_MARK = "__unsloth_mlx_stand_in__"
STAND_IN_VERSION = "0+unsloth.mlx.stand.in"
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


def patch_trl(module: ModuleType) -> None:
    """Patch an imported `trl` in place, keeping every name it lists; applying it again leaves the same objects."""
    listed = list(vars(module).get("__all__", ()))
    _install(module, _other_trainers(listed), listed)
    setattr(module, PATCHED_MARK, True)


def fill_stand_in(module: ModuleType) -> None:
    """Make an empty module the `trl` stand-in used when `trl` is not installed."""
    module.__version__ = STAND_IN_VERSION
    module.__path__ = []
    _install(module, list(KNOWN_TRL_TRAINERS), [])
    setattr(module, STAND_IN_MARK, True)
