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


def map_site_num_proc(value: Any) -> Optional[int]:
    """`value` as `Dataset.map` must see it: a count below 2 becomes None, since 1 would build a one-worker pool."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 2:
        return int(value)
    return None


def map_diagnostics(num_proc: Optional[int]) -> ContextManager[None]:
    """The policy's dead-worker diagnostics around one map call, or nothing when no policy loads."""
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return contextlib.nullcontext()
    return policy.map_failure_diagnostics(num_proc)
