# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Find the dataset worker-count policy: the zoo's module when installed, else unsloth's generated fallback.

A top-level module of its own, so a process that never imports `unsloth` (Studio's backend) can use it
without paying for the package's import.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Optional, Tuple

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
)
# Keywords every map site passes; a policy whose deciding functions lack one predates that site.
REQUIRED_KEYWORDS = ("rows", "closure_bytes", "closure")

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


# ---- auto intent: a config resolves `dataset_num_proc` when built, so it records whether that was auto ----

# The zoo's `unsloth_zoo.num_proc_intent` reads the same attribute; a test keeps the two names equal.
INTENT_ATTRIBUTE = "unsloth_dataset_num_proc_intent"
# The request a map site passes for "in-process" when the config's resolved value was explicit serial.
IN_PROCESS_REQUEST = 1


def is_auto_request(request: object) -> bool:
    """Whether the policy auto-sizes `request` (None, bools, floats, strings): anything but an int."""
    return not isinstance(request, int) or isinstance(request, bool)


def record_intent(config: object, requested: object) -> None:
    """Remember on `config` whether `requested` was auto, next to the value it resolved to."""
    try:
        setattr(config, INTENT_ATTRIBUTE, (is_auto_request(requested), getattr(config, "dataset_num_proc", None)))
    except Exception:  # a frozen or slotted config simply keeps its resolved value
        pass


def map_request(config: object) -> object:
    """What a map site asks the policy for this config: None for auto, else the explicit count (1 = in-process).

    A value the user assigned after the config was built is read as a fresh request.
    """
    value = getattr(config, "dataset_num_proc", None)
    intent = getattr(config, INTENT_ATTRIBUTE, None)
    if not (isinstance(intent, tuple) and len(intent) == 2 and intent[1] == value):
        return value
    was_auto, resolved = intent
    if was_auto:
        return None
    return IN_PROCESS_REQUEST if resolved is None else resolved
