# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Worker counts for trainer configs and map calls, always asked of the policy through `unsloth_num_proc`."""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, ContextManager, Optional

import unsloth_num_proc

from .encodings import MAP_LAYER, in_process_value, layer_of


def config_num_proc(family: str, requested: Any) -> Optional[int]:
    """The `dataset_num_proc` `family`'s config stores for a user's request (None = auto, 0/1 = serial, n = n)."""
    layer = layer_of(family)
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return in_process_value(layer)
    return policy.get_dataset_num_proc(requested, serial_as_none=layer == MAP_LAYER)


def map_site_num_proc(request: Any, rows: Optional[int] = None, function: Any = None) -> Optional[int]:
    """The policy's count for one map of `rows` rows (None = in-process, never 1); auto also weighs `function` pickled.

    `request` is what the config asks for (`unsloth_num_proc.map_request(config)`: None = auto). With no policy
    an explicit count of 2 or more is used as is and anything else runs in-process.
    """
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        if isinstance(request, numbers.Integral) and not isinstance(request, bool) and int(request) >= 2:
            return int(request)
        return None
    return policy.get_dataset_num_proc(request, rows=rows, closure=function)


def map_diagnostics(num_proc: Optional[int]) -> ContextManager[None]:
    """The policy's dead-worker diagnostics around one map call, or nothing when no policy loads."""
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return contextlib.nullcontext()
    return policy.map_failure_diagnostics(num_proc)
