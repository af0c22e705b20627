# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Size the dataset maps of an installed `trl` through the worker-count policy, patched in place (CUDA/CPU path).

Written against trl 1.16.0. When the program imports `trl` (or already has), every exported config class with
a `dataset_num_proc` field resolves it through the policy and records auto intent (`configs`), and each matching
trainer's dataset preparation runs inside a scope that re-sizes every `Dataset.map` with its rows (`trainers`,
`map_scope`). Nothing here imports `trl`, `torch` or `datasets` on its own account.
"""

from __future__ import annotations

import sys
import threading
import warnings
from types import ModuleType

PATCHED_MARKER = "__unsloth_num_proc_patched__"
WRITTEN_AGAINST_TRL = "1.16.0"

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


def _patch_quietly(trl: ModuleType) -> None:
    try:
        patch_trl(trl)
    except Exception as error:
        # A failed patch must not fail the user's import of trl, but it must not go unseen either.
        warnings.warn(
            f"unsloth could not size trl's dataset maps (written against trl {WRITTEN_AGAINST_TRL}): {error!r}",
            RuntimeWarning,
            stacklevel=2,
        )


def install() -> None:
    """Patch `trl` now if it is imported, else right after the program imports it."""
    from ..mlx.import_hooks import import_hooks

    import_hooks().after_import("trl", _patch_quietly)
    trl = sys.modules.get("trl")
    if trl is not None:
        _patch_quietly(trl)
