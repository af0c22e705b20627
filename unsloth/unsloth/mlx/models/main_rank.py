# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Saves and Hub pushes run on rank 0 only when the script was started as several ranks (`mlx.launch`).

Every rank calls the method, as every rank runs the notebook's cells; rank 0 writes, the others wait for it, and a
failure on rank 0 is raised on every rank, so no rank reads a half-written folder or goes on alone.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

WRITING_METHODS = (
    "save_pretrained",
    "save_pretrained_merged",
    "save_pretrained_gguf",
    "push_to_hub",
    "push_to_hub_merged",
    "push_to_hub_gguf",
    "save_lora",
)
# A push saves through the model's own save method: inside a guarded call, the nested one runs as it is.
_INSIDE = threading.local()


def _plain(method: Callable[..., Any]) -> Callable[..., Any]:
    return method


class _MainRankOnly:
    """A writing method that rank 0 runs and the other ranks wait for."""

    def __init__(self, method: Callable[..., Any], name: str) -> None:
        self._method, self._name = method, name
        functools.update_wrapper(self, method)

    def __reduce__(self) -> Any:
        # Pickled as the plain method: a tokenizer sent to map workers must not carry the thread-local state.
        return _plain, (self._method,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from unsloth_zoo.mlx.distributed import current_world

        world = current_world()
        # Rank 0's own writes inside the trainer (checkpoints, final files) run while the other ranks go on.
        if not world.is_distributed or getattr(_INSIDE, "active", False) or getattr(world, "writing_alone", False):
            return self._method(*args, **kwargs)
        result, failure = None, None
        if world.is_main:
            _INSIDE.active = True
            try:
                result = self._method(*args, **kwargs)
            except Exception as error:  # raised below, once the other ranks have been told
                failure = error
            finally:
                _INSIDE.active = False
        world.exchange_status(f"{self._name} (written by rank 0)", failure, [0])
        if failure is not None:
            raise failure
        return result


def write_on_main_rank_only(owner: Any) -> None:
    """Wrap each writing method `owner` has (a model or a tokenizer) so that only rank 0 runs it."""
    for name in WRITING_METHODS:
        method = getattr(owner, name, None)
        if method is not None and not isinstance(method, _MainRankOnly):
            setattr(owner, name, _MainRankOnly(method, name))
