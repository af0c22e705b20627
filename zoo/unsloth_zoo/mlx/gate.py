# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Whether training runs on the MLX backend: decided from the platform and environment, before torch loads.

This module imports only the standard library, so callers can ask it before anything imports `torch`.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

OPT_IN_VARIABLE = "UNSLOTH_MLX"
FORCE_GPU_VARIABLE = "UNSLOTH_FORCE_GPU_PATH"
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class BackendDecision:
    use_mlx: bool
    reason: str

    def __bool__(self) -> bool:
        return self.use_mlx


def _flag(environ: Mapping[str, str], name: str) -> Optional[bool]:
    """True, False, or None (unset or unreadable) for a yes/no environment variable."""
    word = environ.get(name, "").strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def mlx_importable() -> bool:
    """True when `mlx.core` imports here (the compiled extension loads, not just the package exists)."""
    try:
        importlib.import_module("mlx.core")
    except Exception:
        return False
    return True


def decide_backend(
    environ: Optional[Mapping[str, str]] = None,
    system: Optional[str] = None,
    machine: Optional[str] = None,
    importable: Optional[Callable[[], bool]] = None,
) -> BackendDecision:
    """Decide the backend; every input can be supplied so the rules are testable on any host."""
    environ = os.environ if environ is None else environ
    system = sys.platform if system is None else system
    machine = platform.machine() if machine is None else machine
    importable = mlx_importable if importable is None else importable

    if _flag(environ, FORCE_GPU_VARIABLE):
        return BackendDecision(False, f"{FORCE_GPU_VARIABLE}=1 forces the GPU path")
    opt_in = _flag(environ, OPT_IN_VARIABLE)
    if opt_in is False:
        return BackendDecision(False, f"{OPT_IN_VARIABLE} is set to off")
    apple_silicon = system == "darwin" and machine == "arm64"
    if not apple_silicon and not opt_in:
        return BackendDecision(False, f"not Apple silicon ({system}/{machine}) and {OPT_IN_VARIABLE}=1 is not set")
    # Importing mlx is the last check so hosts that are ruled out never pay for it.
    if not importable():
        return BackendDecision(False, "mlx is not importable")
    why = "Apple silicon" if apple_silicon else f"{OPT_IN_VARIABLE}=1"
    return BackendDecision(True, f"{why} and mlx is importable")


def use_mlx_backend() -> bool:
    """The decision for this process as it stands now."""
    return decide_backend().use_mlx
