# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Size the dataset maps of an installed `trl` through the worker-count policy, patched in place (CUDA/CPU path).

Written against trl 1.16.0. When the program imports `trl` (or already has), every exported config class with
a `dataset_num_proc` field resolves it through the policy and records auto intent (`configs`), and each matching
trainer's dataset preparation runs inside a scope that re-sizes every `Dataset.map` with its rows (`trainers`,
`map_scope`). Nothing here imports `trl`, `torch` or `datasets` on its own account: patching waits on an import
hook because importing trl pulls in torch and transformers, seconds a user who never trains with TRL must not pay.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import sys
import threading
import warnings
from types import ModuleType
from typing import Callable

PATCHED_MARKER = "__unsloth_num_proc_patched__"

_lock = threading.Lock()


def patch_trl(trl: ModuleType) -> None:
    """Patch `trl`'s configs and trainers once; a second call is a no-op."""
    from .configs import patch_config_classes
    from .trainers import patch_trainer_classes

    with _lock:
        if getattr(trl, PATCHED_MARKER, False):
            return
        configs = patch_config_classes(trl)
        patch_trainer_classes(trl, configs)
        setattr(trl, PATCHED_MARKER, True)
    _watch_experimental()


def patch_experimental(module: ModuleType) -> None:
    """Patch one `trl.experimental` subpackage (CPO and ORPO live there in 1.16) once it is imported."""
    from .configs import patch_config_classes
    from .trainers import patch_trainer_classes

    with _lock:
        if getattr(module, PATCHED_MARKER, False):
            return
        patch_trainer_classes(module, patch_config_classes(module), expect_preparation=False)
        setattr(module, PATCHED_MARKER, True)


def _watch_experimental() -> None:
    # Only the subpackages' names are read here; each is patched when the program imports it.
    from ..import_hooks import import_hooks

    spec = importlib.util.find_spec("trl.experimental")
    if spec is None or not spec.submodule_search_locations:
        return
    for info in pkgutil.iter_modules(list(spec.submodule_search_locations)):
        if info.ispkg:
            import_hooks().after_import(f"trl.experimental.{info.name}", _patch_experimental_quietly)


def _patch_quietly(trl: ModuleType) -> None:
    _run_quietly(patch_trl, trl)


def _patch_experimental_quietly(module: ModuleType) -> None:
    _run_quietly(patch_experimental, module)


def _run_quietly(patch: Callable[[ModuleType], None], module: ModuleType) -> None:
    from .trainers import WRITTEN_AGAINST_TRL

    try:
        patch(module)
    except Exception as error:
        # A failed patch must not fail the user's import of trl, but it must not go unseen either.
        warnings.warn(
            f"unsloth could not size trl's dataset maps (written against trl {WRITTEN_AGAINST_TRL}): {error!r}",
            RuntimeWarning,
            stacklevel=2,
        )


def install() -> None:
    """Patch `trl` now if it is imported, else right after the program imports it."""
    from ..import_hooks import import_hooks

    import_hooks().after_import("trl", _patch_quietly)
    trl = sys.modules.get("trl")
    if trl is not None:
        _patch_quietly(trl)
