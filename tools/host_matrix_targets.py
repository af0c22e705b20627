"""Import what the matrix evaluates: the zoo policy, unsloth's twin, and Studio's wrapper when it exists.

`--policy-path` puts a directory first on sys.path, so a mutated copy of the packages is what gets
imported; the import is then checked to have come from there.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
from pathlib import Path
from typing import Callable, Dict, Optional

POLICY_MODULE = "unsloth_zoo.dataset_num_proc"
TWIN_MODULE = "unsloth.dataset_num_proc"
STUDIO_PACKAGE = "unsloth_studio"
STUDIO_FUNCTION = "dataset_map_num_proc"
# Studio's ceilings: on auto-sizing, and on any count while several GPUs (one rank each) are visible.
STUDIO_AUTO_CAP = "STUDIO_NUM_PROC_CAP"
STUDIO_MULTI_GPU_CAP = "MULTI_GPU_NUM_PROC_CAP"
STUDIO_CAP_NAMES = (STUDIO_AUTO_CAP, STUDIO_MULTI_GPU_CAP)
# Studio reaches the policy through this module, which logs when no policy loads.
STUDIO_POLICY_LOADER = "unsloth_num_proc"


class TargetError(Exception):
    """The modules to evaluate could not be imported from where they were asked for."""


@dataclasses.dataclass(frozen=True)
class Targets:
    policy: types.ModuleType
    twin: types.ModuleType
    studio: Optional[Callable]
    studio_module: Optional[types.ModuleType]
    studio_skip_reason: Optional[str]

    @property
    def policy_modules(self) -> tuple:
        return (self.policy, self.twin)

    def studio_caps(self) -> Dict[str, Optional[int]]:
        """Studio's published caps by name; None for one the package does not (or no longer) publish."""
        package = sys.modules.get(STUDIO_PACKAGE) if self.studio is not None else None
        caps = {}
        for name in STUDIO_CAP_NAMES:
            value = getattr(package, name, None)
            caps[name] = value if type(value) is int else None
        return caps

    def logger_names(self) -> tuple:
        names = [self.policy.__name__, self.twin.__name__]
        if self.studio_module is not None:
            names.extend((STUDIO_PACKAGE, STUDIO_POLICY_LOADER))
        return tuple(names)


def _is_inside(module: types.ModuleType, directory: Path) -> bool:
    origin = getattr(module, "__file__", None)
    return origin is not None and Path(origin).resolve().is_relative_to(directory.resolve())


def _import_studio() -> tuple:
    try:
        package = importlib.import_module(STUDIO_PACKAGE)
        function = getattr(package, STUDIO_FUNCTION)
    except Exception as error:  # any failure to import means Studio cannot be evaluated, not that the run fails
        return None, None, f"not importable ({type(error).__name__}: {error})"
    return function, sys.modules.get(getattr(function, "__module__", ""), package), None


def load_targets(policy_path: Optional[Path] = None) -> Targets:
    if policy_path is not None:
        if not policy_path.is_dir():
            raise TargetError(f"--policy-path {policy_path} is not a directory")
        sys.path.insert(0, str(policy_path.resolve()))
    try:
        policy = importlib.import_module(POLICY_MODULE)
        twin = importlib.import_module(TWIN_MODULE)
    except ImportError as error:
        raise TargetError(f"cannot import the policy: {error}") from error
    if policy_path is not None:
        if not _is_inside(policy, policy_path):
            raise TargetError(f"{POLICY_MODULE} came from {policy.__file__}, not from --policy-path {policy_path}")
        # A twin copy under the path is used too; without one, the installed twin is compared.
        if (policy_path / "unsloth").is_dir() and not _is_inside(twin, policy_path):
            raise TargetError(f"{TWIN_MODULE} came from {twin.__file__}, not from --policy-path {policy_path}")
    studio, studio_module, reason = _import_studio()
    return Targets(policy, twin, studio, studio_module, reason)
