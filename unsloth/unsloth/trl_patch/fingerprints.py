# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A scoped hook on `datasets.Dataset.filter`: inside a sizing scope its `num_proc` is a constant.

`Dataset.filter` puts `num_proc` into its fingerprint, so ranks that size it differently (a rank that sees less
free memory) name its cache differently and recompute it, and every step after it. Inside a scope the filter
is given `num_proc=None`; the map it runs inside is sized by the map hook like any other, and map fingerprints
leave `num_proc` out. The filter's own `batched` is kept for that map's sizing (`enclosing_filter_batched`),
since the map always runs batched. Outside a scope every call passes through untouched.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from typing import Any, Callable

from .own_signature import datasets_own_signature, default_of

HOOK_MARKER = "__unsloth_constant_filter__"
# What every rank passes to the filter itself; the map inside it gets the sized count.
FINGERPRINT_NUM_PROC = None

_install_lock = threading.Lock()
# The `batched` argument, as passed, of the filter being run in a scope; the sentinel outside one.
_NO_FILTER = object()
_filter_batched: contextvars.ContextVar = contextvars.ContextVar("unsloth_filter_batched", default=_NO_FILTER)


def enclosing_filter_batched(otherwise: Any) -> Any:
    """The `batched` argument of the scoped filter this map runs inside, or `otherwise` outside one."""
    batched = _filter_batched.get()
    return otherwise if batched is _NO_FILTER else batched


def _constant_filter(original: Any, in_scope: Callable[[], bool]) -> Any:
    # datasets' own signature, not a wrapper's `*args, **kwargs`, which would drop a num_proc set by name.
    signature = datasets_own_signature(original)

    @functools.wraps(original)
    def filter(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not in_scope():
            return original(self, *args, **kwargs)
        if signature is None:  # hidden: trl passes num_proc by name, so the keyword is the one to pin
            kwargs["num_proc"] = FINGERPRINT_NUM_PROC
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["num_proc"] = FINGERPRINT_NUM_PROC
        token = _filter_batched.set(bound.arguments.get("batched", default_of(signature, "batched")))
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            _filter_batched.reset(token)

    setattr(filter, HOOK_MARKER, True)
    return filter


def install_filter_hook(in_scope: Callable[[], bool]) -> None:
    """Put the pass-through hook on `datasets.Dataset.filter` once; `in_scope` says whether a scope is open."""
    import datasets

    with _install_lock:
        if not getattr(datasets.Dataset.filter, HOOK_MARKER, False):
            datasets.Dataset.filter = _constant_filter(datasets.Dataset.filter, in_scope)
