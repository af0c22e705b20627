# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Find the dataset worker-count policy (the zoo's module when installed, else unsloth's generated fallback),
and the one way every map site and config in `unsloth` asks it: `sized_map`, `map_num_proc`, `config_num_proc`.

When no policy loads, the one answer is in-process: `num_proc=None` at every map and in every config.
A top-level module of its own, so a process that never imports `unsloth` (Studio's backend) can use it
without paying for the package's import.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable, ContextManager, Optional, Tuple

CANONICAL_MODULE = "unsloth_zoo.dataset_num_proc"
PACKAGED_FALLBACK_MODULE = "unsloth.dataset_num_proc"
# The off-disk copy is registered under this name, so every later call gets the same module object.
OFF_DISK_MODULE_NAME = "_unsloth_dataset_num_proc_fallback"
# What callers use; a module without all of it (an older zoo's, an empty or truncated file) is never handed out.
REQUIRED_API = (
    "get_dataset_num_proc",
    "explain_dataset_num_proc",
    "environment_override",
    "map_failure_diagnostics",
    "resolve_responses_only_num_proc",
    "reset_warning_state",
    "pickled_size",
    "sized_map",
    "config_num_proc",
    "record_intent",
    "map_request",
    "is_auto_request",
)
# Keywords the map sites pass; a policy whose deciding functions lack one predates that site.
REQUIRED_KEYWORDS = ("rows", "closure_bytes", "closure", "main_first", "batched")

logger = logging.getLogger(__name__)
_load_lock = threading.Lock()
_warned_no_policy = False


def load_policy() -> Optional[ModuleType]:
    """The policy module, trying the zoo, then `unsloth`'s copy, then that copy off disk; None if all fail."""
    global _warned_no_policy
    failures = []
    try:
        return _require_api(importlib.import_module(CANONICAL_MODULE))
    except Exception as error:
        failures.append(f"{CANONICAL_MODULE}: {type(error).__name__}: {error}")
    if "unsloth" in sys.modules:
        try:
            return _require_api(importlib.import_module(PACKAGED_FALLBACK_MODULE))
        except Exception as error:
            failures.append(f"{PACKAGED_FALLBACK_MODULE}: {type(error).__name__}: {error}")
    try:
        return _load_fallback_off_disk()
    except Exception as error:
        failures.append(f"{OFF_DISK_MODULE_NAME}: {type(error).__name__}: {error}")
    if not _warned_no_policy:
        _warned_no_policy = True
        logger.warning(
            "No dataset worker-count policy could be loaded (%s); callers fall back to their safe defaults.",
            "; ".join(failures),
        )
    return None


def _require_api(module: ModuleType) -> ModuleType:
    missing = [name for name in REQUIRED_API if not callable(getattr(module, name, None))]
    if not missing:
        missing = [
            f"{name}({keyword}=)"
            for name in ("get_dataset_num_proc", "explain_dataset_num_proc")
            for keyword in REQUIRED_KEYWORDS
            if keyword not in _parameters(getattr(module, name))
        ]
    if missing:
        source = getattr(module, "__file__", None) or module.__name__
        raise ImportError(
            f"{source} is empty or truncated, or from an older release: it lacks {', '.join(missing)}; "
            f"reinstall it (pip install --force-reinstall unsloth unsloth_zoo)"
        )
    return module


def _parameters(function: object) -> Tuple[str, ...]:
    try:
        return _cached_parameters(function)
    except TypeError:  # an unhashable callable
        return _cached_parameters.__wrapped__(function)


# By function object: every map asks load_policy(), and inspect.signature cost more than the policy's answer.
@functools.lru_cache(maxsize=32)
def _cached_parameters(function: object) -> Tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ()


def _load_fallback_off_disk() -> ModuleType:
    with _load_lock:
        module = sys.modules.get(OFF_DISK_MODULE_NAME)
        if module is not None:
            return module
        # find_spec on a top-level package locates it without executing its __init__.py.
        package = importlib.util.find_spec("unsloth")
        if package is None or not package.submodule_search_locations:
            raise ModuleNotFoundError("the unsloth package is not installed")
        path = os.path.join(list(package.submodule_search_locations)[0], "dataset_num_proc.py")
        spec = importlib.util.spec_from_file_location(OFF_DISK_MODULE_NAME, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[OFF_DISK_MODULE_NAME] = module
        try:
            spec.loader.exec_module(module)
            _require_api(module)
        except BaseException:
            del sys.modules[OFF_DISK_MODULE_NAME]
            raise
        return module


# ---- the one way in for map sites and configs: the policy's answer, or in-process when none loads ----


def map_num_proc(
    request: Any = None,
    *,
    rows: Optional[int] = None,
    closure: Any = None,
    closure_bytes: Optional[int] = None,
    main_first: Optional[str] = None,
    batched: Optional[bool] = None,
) -> Optional[int]:
    """`num_proc` for one map (None = in-process, never 1): the policy's answer, or None when no policy loads.
    `main_first` ("main" / "rest") says the map runs inside a main-first block of local ranks; `batched` is the
    map's own argument (a batched map asks more rows of each worker)."""
    policy = load_policy()
    if policy is None:
        return None
    return policy.get_dataset_num_proc(
        request, rows=rows, closure=closure, closure_bytes=closure_bytes, main_first=main_first, batched=batched
    )


def config_num_proc(request: Any, family: str) -> Optional[int]:
    """The `dataset_num_proc` a `family` trainer config stores for `request`; None (in-process) when no policy loads."""
    policy = load_policy()
    return None if policy is None else policy.config_num_proc(request, family)


def map_diagnostics(num_proc: Optional[int]) -> ContextManager[None]:
    """The policy's dead-worker diagnostics around one map call, or nothing when no policy loads."""
    policy = load_policy()
    return contextlib.nullcontext() if policy is None else policy.map_failure_diagnostics(num_proc)


def sized_map(
    dataset: Any, function: Any, request: Any = None, *, sizer: Optional[Callable[..., Any]] = None, **map_kwargs: Any
) -> Any:
    """`dataset.map(function, **map_kwargs)` sized by the policy's `sized_map` (rows, closure, diagnostics);
    with no policy it runs in-process, or with what `sizer(request, rows=..., closure=..., batched=...)` answers."""
    policy = load_policy()
    if policy is not None:
        return policy.sized_map(dataset, function, request, sizer=sizer, **map_kwargs)
    if not hasattr(dataset, "__len__"):
        map_kwargs.pop("desc", None)
        return dataset.map(function, **map_kwargs)
    batched = map_kwargs.get("batched", False)
    workers = None if sizer is None else sizer(request, rows=len(dataset), closure=function, batched=batched)
    return dataset.map(function, num_proc=workers, **map_kwargs)


def record_intent(config: Any, requested: Any) -> None:
    """Remember on `config` whether `requested` was auto (see the policy's `record_intent`); nothing without one."""
    policy = load_policy()
    if policy is not None:
        policy.record_intent(config, requested)


def map_request(config: Any) -> Any:
    """What a map site asks for `config` (None = auto, 1 = in-process); its `dataset_num_proc` as is without a policy."""
    policy = load_policy()
    return getattr(config, "dataset_num_proc", None) if policy is None else policy.map_request(config)


def is_auto_request(request: Any) -> bool:
    """Whether the policy auto-sizes `request`; without a policy only None is auto."""
    policy = load_policy()
    return request is None if policy is None else bool(policy.is_auto_request(request))


def responses_only_num_proc(trainer: Any, num_proc: Any) -> Optional[int]:
    """The `num_proc` to hand the zoo's `train_on_responses_only`; 1 (the zoo's in-process) without a policy."""
    policy = load_policy()
    return 1 if policy is None else policy.resolve_responses_only_num_proc(trainer, num_proc)
