# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Find the signature of datasets' own `Dataset.map` / `Dataset.filter` behind wrappers put in front of them.

A profiler, tracker or test spy written as `def map(self, *args, **kwargs)` hides the real parameters: binding
against it would drop a `num_proc` set by name. The search follows `__wrapped__`, closure cells and the
globals a wrapper's code names, and stops after a bounded number of callables.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterator, List, Optional, Set

# How far the search goes through wrappers before it gives up.
SEARCH_LIMIT = 64


def _is_datasets_method(candidate: Any) -> bool:
    module = getattr(candidate, "__module__", None) or ""
    try:
        return module.split(".")[0] == "datasets" and "num_proc" in inspect.signature(candidate).parameters
    except (TypeError, ValueError):
        return False


def _inner_callables(candidate: Any) -> Iterator[Any]:
    """What a wrapper may call: its `__wrapped__`, its closure's cells, the globals its code names."""
    function = getattr(candidate, "__func__", candidate)
    yield getattr(function, "__wrapped__", None)
    for cell in getattr(function, "__closure__", None) or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue
    code, scope = getattr(function, "__code__", None), getattr(function, "__globals__", None) or {}
    for name in getattr(code, "co_names", ()):
        yield scope.get(name)


def default_of(signature: inspect.Signature, name: str) -> Any:
    """`name`'s default in `signature`; None where that datasets release has no such parameter."""
    parameter = signature.parameters.get(name)
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def datasets_own_signature(current: Any) -> Optional[inspect.Signature]:
    """The signature of the datasets method (one taking `num_proc`) behind `current`; None if a wrapper hides it."""
    pending: List[Any] = [current]
    seen: Set[int] = set()
    while pending and len(seen) < SEARCH_LIMIT:
        candidate = pending.pop(0)
        if candidate is None or not callable(candidate) or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        if _is_datasets_method(candidate):
            return inspect.signature(candidate)
        pending.extend(_inner_callables(candidate))
    return None
