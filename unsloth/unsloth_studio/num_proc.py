# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The worker count for every Studio dataset map() and config: the policy's answer under Studio's rules.

In order: the escape hatch `UNSLOTH_DATASET_NUM_PROC` (never capped by Studio); Windows and macOS run
in-process; an initialised Intel XPU runs in-process; then the policy, given the request as written,
and Studio's multi-GPU cap on its answer. Without any policy module Studio uses `safe_num_proc`.
"""

from __future__ import annotations

from typing import Any, Optional

import unsloth_num_proc

from .accelerators import xpu_initialized
from .caps import apply_multi_gpu_cap
from .fallback import safe_num_proc_for_layer, workers_unusable_here

# The policy encodes any request of 1 as in-process for the layer it is asked about.
IN_PROCESS_REQUEST = 1


def dataset_map_num_proc(
    desired: Any = None,
    *,
    serial_as_none: bool = True,
    rows: Optional[int] = None,
    closure_bytes: Optional[int] = None,
    closure: Any = None,
    batched: Optional[bool] = None,
) -> Optional[int]:
    """`num_proc` for a map() call (serial_as_none=True: in-process is None) or a config (False: in-process is 1).

    `rows` and the mapped function (`closure`, weighed by the policy only when the rows leave room for workers,
    or its size as `closure_bytes`), when known, let the policy keep small maps in-process, and a `batched` map
    asks more rows of each worker. When no policy module can be loaded at all, the answer is
    `safe_num_proc(desired)` in the same encoding, and the hatch is not read.
    """
    policy = unsloth_num_proc.load_policy()
    if policy is None:
        return safe_num_proc_for_layer(desired, serial_as_none=serial_as_none)
    decided, _ = policy.environment_override()
    if decided:
        # The policy returns the hatch's value uncapped, with in-process already encoded for this layer.
        return policy.get_dataset_num_proc(desired, serial_as_none=serial_as_none)
    if workers_unusable_here():
        return None
    if xpu_initialized():
        # A worker forked after the XPU was initialised inherits a device context it cannot use.
        return policy.get_dataset_num_proc(IN_PROCESS_REQUEST, serial_as_none=serial_as_none)
    answer = policy.get_dataset_num_proc(
        desired, serial_as_none=serial_as_none, rows=rows, closure_bytes=closure_bytes, closure=closure, batched=batched
    )
    return apply_multi_gpu_cap(answer)
