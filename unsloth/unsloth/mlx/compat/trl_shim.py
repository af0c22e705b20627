# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`from trl import SFTTrainer, SFTConfig` on MLX: an installed `trl` patched in place, or a stand-in package.

`SFTTrainer` becomes `UnslothTrainer` and `SFTConfig` the MLX arguments with TRL's three-epoch default. The DPO, ORPO
and GRPO names become the MLX trainers and configs of `unsloth.mlx.rl` (those present), ORPO's also under TRL 1.x's
`trl.experimental.orpo`. Every other trainer `trl` lists becomes a stub that refuses to build; the list is read from `trl.__all__`, never by touching
the names, since `trl` imports each trainer's module (and with it torch) on first access. An installed `trl` keeps
its whole `__all__` while torch is installed; without torch its `__all__` lists, once first read, only the names
that load, so `from trl import *` works where without unsloth it would fail on the first name needing torch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Tuple

from ...import_hooks import import_hooks
from ..training.arguments import UnslothTrainingArguments
from ..training.trainer import UnslothTrainer

PATCHED_MARK = "__unsloth_mlx_patched__"
STAND_IN_MARK = "__unsloth_mlx_stand_in__"
STAND_IN_VERSION = "0.0.0+unsloth-mlx"
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

# TRL's names the MLX path trains, each with its module under `unsloth.mlx.rl`; a module not there yet is skipped.
MLX_RL_NAMES = {
    "DPOTrainer": "dpo",
    "DPOConfig": "dpo_config",
    "ORPOTrainer": "orpo",
    "ORPOConfig": "orpo_config",
    "GRPOTrainer": "grpo",
    "GRPOConfig": "grpo_config",
}
ORPO_HOME = "trl.experimental.orpo"


class SFTConfig(UnslothTrainingArguments):
    """TRL's `SFTConfig` on MLX: like `UnslothTrainingArguments`, but three epochs when no length is given."""

    epochs_when_length_unset = 3


@functools.lru_cache(maxsize=None)
def unsupported_trainer(name: str) -> type:
    """A class named `name` that refuses to build; one class per name, so patching twice changes nothing."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"{name} is not available on MLX: only SFT training (SFTTrainer / UnslothTrainer) and "
            f"{', '.join(sorted(name for name in mlx_rl_names() if name.endswith('Trainer')))} run on the MLX backend"
        )

    return type(
        name, (), {"__init__": refuse, "__module__": "trl", "__doc__": f"{name} stand-in: refuses to build on MLX."}
    )


@functools.lru_cache(maxsize=None)
def _mlx_rl_names() -> Tuple[Tuple[str, Any], ...]:
    found = []
    for name, module_name in MLX_RL_NAMES.items():
        full_name = f"unsloth.mlx.rl.{module_name}"
        try:
            if importlib.util.find_spec(full_name) is None:
                continue
            found.append((name, getattr(importlib.import_module(full_name), name)))
        except Exception as error:
            # A trainer that fails to load keeps refusing by name; patching the rest of trl must still succeed.
            warnings.warn(f"unsloth could not load {name} from {full_name}: {error!r}", RuntimeWarning, stacklevel=2)
    return tuple(found)


def mlx_rl_names() -> Dict[str, Any]:
    """The MLX trainers and configs that stand behind TRL's names, by name (only the modules that exist)."""
    return dict(_mlx_rl_names())


def _other_trainers(names: List[str]) -> List[str]:
    trained = mlx_rl_names()
    return [name for name in names if name.endswith("Trainer") and name != "SFTTrainer" and name not in trained]


def _orpo_home(module: ModuleType, trained: Dict[str, Any]) -> None:
    """`trl.experimental.orpo` (where TRL 1.16 moved ORPO) holding the MLX ORPO names, real package or not."""
    if "ORPOTrainer" not in trained:
        return
    home = ModuleType(ORPO_HOME, "ORPO on MLX: TRL's `trl.experimental.orpo` names, served by unsloth.mlx.rl.")
    home.ORPOTrainer, home.ORPOConfig = trained["ORPOTrainer"], trained.get("ORPOConfig")
    home.__all__ = ["ORPOConfig", "ORPOTrainer"]
    setattr(home, STAND_IN_MARK, True)
    # The real package's folder, so TRL's own `trl.experimental.orpo.orpo_trainer` still imports by its full name.
    real = Path(getattr(module, "__file__", None) or ".").parent / "experimental" / "orpo"
    home.__path__ = [str(real)] if getattr(module, "__file__", None) and real.is_dir() else []
    sys.modules[ORPO_HOME] = home
    if getattr(module, STAND_IN_MARK, False):
        experimental = ModuleType("trl.experimental")
        experimental.__path__ = []
        sys.modules["trl.experimental"] = experimental
        module.experimental = experimental
    # The real `trl.experimental` (loaded later, or already) gets the stand-in as its `orpo` attribute.
    import_hooks().after_import("trl.experimental", _attach_orpo_home)


def _attach_orpo_home(experimental: ModuleType) -> None:
    experimental.orpo = sys.modules[ORPO_HOME]


def _install(module: ModuleType, trainers: List[str], listed: List[str]) -> None:
    for name in trainers:
        setattr(module, name, unsupported_trainer(name))
    trained = mlx_rl_names()
    for name, value in trained.items():
        setattr(module, name, value)
    module.SFTTrainer = UnslothTrainer
    module.SFTConfig = SFTConfig
    ours = ("SFTConfig", "SFTTrainer", *trained, *trainers)
    module.__all__ = [*listed, *(name for name in ours if name not in listed)]
    _orpo_home(module, trained)


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
    setattr(module, STAND_IN_MARK, True)
    _install(module, _other_trainers(list(KNOWN_TRL_TRAINERS)), [])
