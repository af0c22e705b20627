# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A scoped hook on `datasets.Dataset.map`: inside `sized_maps(request)` every map is sized by the policy.

Outside a scope the hook passes every call through untouched. It binds each call against datasets' own
`Dataset.map` signature, found behind any wrapper installed in front of it; where a wrapper hides it, the hook
says so once by name and the scope's maps run in-process. Inside, the caller's `num_proc` is replaced by
the policy's answer for the scope's request (None = auto), given that dataset's row count and the pickled size
of what each worker receives (the function and its `fn_kwargs`), and the map runs inside the policy's
dead-worker diagnostics. In-process is always `num_proc=None` there, never 1.

A scope may carry a weight (a trainer's processing class): every auto map in it is weighed at least that
heavy, because a preparation is one pipeline and its cheap steps (EOS, labels, truncation) only repay a pool
where its tokenizing step does. The weight is pickled once per scope, and only when rows leave room for workers.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import threading
import warnings
from typing import Any, Iterator, Optional

import unsloth_num_proc

from .fingerprints import enclosing_filter_batched, install_filter_hook
from .own_signature import datasets_own_signature, default_of
from .ranks import main_first_turn, watch_main_first

HOOK_MARKER = "__unsloth_sized_map__"
# A sentinel no request can equal: maps outside any scope pass through.
_OUTSIDE = object()
_request: contextvars.ContextVar = contextvars.ContextVar("unsloth_map_request", default=_OUTSIDE)
_install_lock = threading.Lock()


@dataclasses.dataclass
class Scope:
    """One `sized_maps` block: the request every map in it is sized for, and the weight every map carries."""

    request: Any
    weight: Any = None
    weight_bytes: Optional[int] = None


def map_num_proc(scope: Scope, rows: Optional[int], payload: Any, batched: Optional[bool] = None) -> Optional[int]:
    """The `num_proc` one map gets: the policy's answer, with rows, `batched` and (for auto) the closure weight known."""
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return None
    if scope.weight is not None and scope.weight_bytes is None and unsloth_num_proc.is_auto_request(scope.request):
        floor = policy.explain_dataset_num_proc(
            scope.request, rows=rows, closure=scope.weight, main_first=main_first_turn(), batched=batched
        )
        scope.weight_bytes = floor.closure_bytes
        if floor.value is None:
            return None
        if floor.closure_bytes is None:
            scope.weight = None  # weighed and unpicklable: no later map tries again
    return unsloth_num_proc.map_num_proc(
        scope.request,
        rows=rows,
        closure_bytes=scope.weight_bytes,
        closure=payload,
        main_first=main_first_turn(),
        batched=batched,
    )


class MapSignatureHidden(RuntimeWarning):
    """A wrapper on `Dataset.map` hides datasets' own signature, so the hook cannot place `num_proc`."""


def _describe(function: Any) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


def _sized_map(original: Any) -> Any:
    signature = datasets_own_signature(original)
    if signature is None:
        warnings.warn(
            f"unsloth cannot find datasets' own Dataset.map behind {_describe(original)}, so it cannot size the "
            "maps trl prepares datasets with: they run in-process (num_proc=None). Wrap Dataset.map with "
            "functools.wraps to let unsloth size them.",
            MapSignatureHidden,
            stacklevel=3,
        )

    @functools.wraps(original)
    def map(self: Any, *args: Any, **kwargs: Any) -> Any:
        scope = _request.get()
        if scope is _OUTSIDE:
            return original(self, *args, **kwargs)
        token = _request.set(_OUTSIDE)  # a map that maps again inside is not sized twice
        try:
            if signature is None:
                kwargs["num_proc"] = None
                return original(self, *args, **kwargs)
            bound = signature.bind(self, *args, **kwargs)
            function = bound.arguments.get("function")
            fn_kwargs = bound.arguments.get("fn_kwargs")
            # A filter runs its predicate through a batched map whatever the predicate is: its own `batched` counts.
            batched = enclosing_filter_batched(bound.arguments.get("batched", default_of(signature, "batched")))
            workers = map_num_proc(scope, len(self), (function, fn_kwargs), batched)
            bound.arguments["num_proc"] = workers
            with unsloth_num_proc.map_diagnostics(workers):
                return original(*bound.args, **bound.kwargs)
        finally:
            _request.reset(token)

    setattr(map, HOOK_MARKER, True)
    return map


def install_map_hook() -> None:
    """Put the pass-through hook on `datasets.Dataset.map` once."""
    import datasets

    with _install_lock:
        if not getattr(datasets.Dataset.map, HOOK_MARKER, False):
            datasets.Dataset.map = _sized_map(datasets.Dataset.map)


@contextlib.contextmanager
def sized_maps(request: Any, weight: Any = None) -> Iterator[None]:
    """Size every `Dataset.map` run inside by the policy for `request` (None = auto, n = explicit), each auto
    map weighed at least as heavy as `weight` pickled."""
    install_map_hook()
    install_filter_hook(lambda: _request.get() is not _OUTSIDE)
    watch_main_first()
    token = _request.set(Scope(request, weight))
    try:
        yield
    finally:
        _request.reset(token)
