# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which local ranks map at the same time: read off accelerate's main-first block while it runs.

trl 1.16 prepares each dataset inside `global_then_local_main_first()`, that is accelerate's
`PartialState.local_main_process_first()`: the local main rank runs the block alone while the others wait
at a barrier, then the others run it together. `watch_main_first()` wraps that method so a map inside the
block knows its turn; the policy then shares the host among the ranks that really run (`main_first=`).
Outside such a block, or in a single process, nothing changes: every local rank counts.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
from typing import Any, Iterator, Optional

# The policy's `main_first=` values (MAIN_FIRST_MAIN, MAIN_FIRST_REST); spelled here so nothing loads it early.
MAIN = "main"
REST = "rest"
WATCH_MARKER = "__unsloth_watches_main_first__"
STATE_MODULE = "accelerate.state"

_turn: contextvars.ContextVar = contextvars.ContextVar("unsloth_main_first_turn", default=None)
_watch_lock = threading.Lock()


def main_first_turn() -> Optional[str]:
    """This process's turn inside a distributed main-first block ("main" or "rest"), else None."""
    return _turn.get()


def turn_of(state: Any) -> Optional[str]:
    """This process's turn in `state`'s main-first block; None when one process runs alone (no one waits)."""
    try:
        if int(state.num_processes) <= 1:
            return None
        return MAIN if state.is_local_main_process else REST
    except Exception:  # a state that cannot say keeps the environment's division
        return None


def _watching(original: Any) -> Any:
    @functools.wraps(original)
    @contextlib.contextmanager
    def local_main_process_first(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        token = _turn.set(turn_of(self))
        try:
            with original(self, *args, **kwargs) as value:
                yield value
        finally:
            _turn.reset(token)

    setattr(local_main_process_first, WATCH_MARKER, True)
    return local_main_process_first


def watch_main_first() -> bool:
    """Wrap accelerate's `PartialState.local_main_process_first` once, if accelerate is imported; True if watched."""
    partial_state: Any = getattr(sys.modules.get(STATE_MODULE), "PartialState", None)
    if getattr(partial_state, "local_main_process_first", None) is None:
        return False
    with _watch_lock:
        original = partial_state.local_main_process_first
        if not getattr(original, WATCH_MARKER, False):
            partial_state.local_main_process_first = _watching(original)
    return True
