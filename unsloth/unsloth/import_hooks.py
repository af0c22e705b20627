# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Run a patch right after a named module is imported, or stand a module in when it is not installed.

One `sys.meta_path` finder watches a few names. For a watched module that exists it hands back the real spec with
its loader wrapped, so the patch runs once the module has executed; for a missing one that has a stand-in it hands
back a spec that builds the stand-in. Nothing is imported here until the program imports it itself.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional

Patch = Callable[[ModuleType], None]


def _run_patches(name: str, patches: List[Patch], module: ModuleType) -> None:
    for patch in patches:
        try:
            patch(module)
        except Exception as error:
            # A failed patch must never fail the user's own import of that module.
            warnings.warn(f"unsloth could not patch {name}: {error!r}", RuntimeWarning, stacklevel=2)


class _PatchAfterExec:
    """The real loader, plus the patches run on the finished module (a package may replace itself in sys.modules)."""

    def __init__(self, wrapped: Any, name: str, patches: List[Patch]) -> None:
        self._wrapped = wrapped
        self._name = name
        self._patches = patches

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self._wrapped, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._wrapped.exec_module(module)
        _run_patches(self._name, self._patches, sys.modules.get(self._name, module))

    def __getattr__(self, attribute: str) -> Any:
        # Read through __dict__ so a half-built copy (copy, pickle) raises AttributeError instead of recursing.
        wrapped = self.__dict__.get("_wrapped")
        if wrapped is None:
            raise AttributeError(attribute)
        return getattr(wrapped, attribute)


class _BuildStandIn:
    """Loader for a module that is not installed: an empty package filled by `fill`."""

    def __init__(self, fill: Patch) -> None:
        self._fill = fill

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        self._fill(module)


class ImportHooks:
    """The finder: `after_import(name, patch)` and `stand_in(name, fill)` register; `find_spec` applies them."""

    def __init__(self) -> None:
        self._patches: Dict[str, List[Patch]] = {}
        self._stand_ins: Dict[str, Patch] = {}
        self._lock = threading.Lock()

    def after_import(self, name: str, patch: Patch) -> None:
        """Run `patch(module)` once `name` is imported; right now if it already is. Registering twice is a no-op."""
        with self._lock:
            patches = self._patches.setdefault(name, [])
            if patch in patches:
                return
            patches.append(patch)
        module = sys.modules.get(name)
        if module is not None:
            _run_patches(name, [patch], module)

    def stand_in(self, name: str, fill: Patch) -> None:
        self._stand_ins[name] = fill

    def _real_spec(self, fullname: str, path: Any, target: Any) -> Optional[importlib.machinery.ModuleSpec]:
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in self._patches and fullname not in self._stand_ins:
            return None
        spec = self._real_spec(fullname, path, target)
        if spec is None:
            fill = self._stand_ins.get(fullname)
            return (
                None if fill is None else importlib.machinery.ModuleSpec(fullname, _BuildStandIn(fill), is_package=True)
            )
        if spec.loader is not None and self._patches.get(fullname):
            spec.loader = _PatchAfterExec(spec.loader, fullname, self._patches[fullname])
        return spec

    def invalidate_caches(self) -> None:
        return None


_HOOKS = ImportHooks()


def import_hooks() -> ImportHooks:
    """The process's one finder, first on `sys.meta_path` so it sees watched names before the path finders do."""
    if _HOOKS not in sys.meta_path:
        sys.meta_path.insert(0, _HOOKS)
    return _HOOKS
