# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The order CUDA Unsloth's trainer visits training rows, drawn with `torch` when it is installed.

Hugging Face's trainer shuffles with accelerate's seedable sampler: each epoch a fresh `torch.Generator` seeded
with `seed + epoch` feeds `torch.randperm(rows)`, and batches are consecutive slices of that permutation.
Without `torch` that exact sequence cannot be drawn, so the backend's own seeded shuffle is used instead.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import List

logger = logging.getLogger(__name__)
_noted_fallback = False


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def cuda_epoch_order(rows: int, seed: int, epoch: int) -> List[int]:
    """Row indices in the order CUDA Unsloth's trainer reads them in epoch `epoch` (imports torch)."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(int(seed) + int(epoch))
    return torch.randperm(rows, generator=generator).tolist()


def note_fallback_order() -> None:
    """Say once per process that without torch the shuffled order is seeded but not CUDA Unsloth's."""
    global _noted_fallback
    if not _noted_fallback:
        _noted_fallback = True
        logger.warning(
            "torch is not installed, so the training rows are shuffled by a seeded numpy order; it is reproducible "
            "but differs from the order CUDA Unsloth would use (install torch to reproduce that order)"
        )
