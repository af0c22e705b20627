# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Run one Studio `Dataset.map`: sized by `dataset_map_num_proc`, wrapped in the policy's dead-worker diagnostics."""

from __future__ import annotations

from typing import Any, Callable

import unsloth_num_proc

from .num_proc import dataset_map_num_proc


def run_map(dataset: Any, function: Callable, *, num_proc: Any = None, desc: str, **map_kwargs: Any) -> Any:
    """`dataset.map(function, **map_kwargs)` with `num_proc` (the caller's request) resolved for this host."""
    return unsloth_num_proc.sized_map(dataset, function, num_proc, sizer=dataset_map_num_proc, desc=desc, **map_kwargs)
