# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Run one Studio `Dataset.map`: sized by `dataset_map_num_proc`, wrapped in the policy's dead-worker diagnostics."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import unsloth_num_proc

from .num_proc import dataset_map_num_proc


def _is_streaming(dataset: Any) -> bool:
    try:
        from datasets import IterableDataset
    except ImportError:
        return False
    return isinstance(dataset, IterableDataset)


def failure_diagnostics(num_proc: Any) -> ContextManager[None]:
    """The policy's `map_failure_diagnostics(num_proc)`, or a no-op when no policy module loads."""
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return contextlib.nullcontext()
    return policy.map_failure_diagnostics(num_proc)


def run_map(dataset: Any, function: Callable, *, num_proc: Any = None, desc: str, **map_kwargs: Any) -> Any:
    """`dataset.map(function, **map_kwargs)` with `num_proc` (the caller's request) resolved for this host."""
    if _is_streaming(dataset):
        # Streaming datasets map lazily in the consumer and take no num_proc.
        return dataset.map(function, **map_kwargs)
    workers = dataset_map_num_proc(num_proc, rows=len(dataset), closure=function)
    with failure_diagnostics(workers):
        return dataset.map(function, num_proc=workers, desc=desc, **map_kwargs)
