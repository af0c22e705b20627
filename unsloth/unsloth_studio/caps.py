# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Studio's own limits on dataset map() worker counts."""

from __future__ import annotations

from typing import Optional

from .accelerators import visible_gpu_count

# The policy's AUTO_NUM_PROC_CAP restated, so the policy-free fallback caps alike; a canary test keeps them equal.
STUDIO_NUM_PROC_CAP = 8
# With several GPUs visible, one training rank per GPU shares the host, so each keeps its map workers few.
MULTI_GPU_NUM_PROC_CAP = 4


def apply_multi_gpu_cap(count: Optional[int]) -> Optional[int]:
    """`count` limited to MULTI_GPU_NUM_PROC_CAP when more than one GPU is visible; in-process values pass through."""
    if count is None or count <= 1:
        return count
    if visible_gpu_count() > 1:
        return min(count, MULTI_GPU_NUM_PROC_CAP)
    return count
