# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""GRPO's evaluation under `mlx.launch`: each metric's mean over every chunk any rank evaluated, the same on all ranks.

A rank may hold fewer chunks than another, or none, so every rank takes the same three collectives, in order:
the ranks' status (a failure stops them all, with its cause), rank 0's metric names, then each name's sum and count.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import mlx.core as mx
import numpy as np

from unsloth_zoo.mlx.distributed import World

__all__ = ["chunk_means"]

# Separates the metric names in the bytes rank 0 shares; no TRL metric name holds it.
_NAME_SEPARATOR = "\n"


def _encode_names(names: List[str]) -> np.ndarray:
    return np.frombuffer(_NAME_SEPARATOR.join(names).encode("utf-8"), dtype=np.uint8).astype(np.int32)


def _decode_names(codes: np.ndarray) -> List[str]:
    text = bytes(int(code) for code in codes).decode("utf-8")
    return text.split(_NAME_SEPARATOR) if text else []


def chunk_means(
    world: World, what: str, stored: Dict[str, List[float]], failure: Optional[BaseException]
) -> Dict[str, float]:
    """Each metric's mean over the chunks of every rank; `stored` holds this rank's value per chunk it evaluated.

    Rank 0 takes the first chunk of every evaluation, so its names are the ones every rank logs. `failure`, this
    rank's error while evaluating, is raised here once the other ranks know of it.
    """
    if not world.is_distributed:
        if failure is not None:
            raise failure
        return {name: float(np.mean(values)) for name, values in stored.items()}
    names = sorted(stored) if world.is_main else []
    (length,) = world.exchange_status(f"{what}: waiting for every rank's chunks", failure, [len(_encode_names(names))])
    if failure is not None:
        raise failure
    if not length:
        return {}
    codes = np.zeros(int(length), dtype=np.int32)
    if world.is_main:
        codes[:] = _encode_names(names)
    (shared,) = world.collective(f"{what}: sharing rank 0's metric names", [mx.array(codes)])
    names = _decode_names(shared)
    table = np.array([[math.fsum(stored.get(name, [])), len(stored.get(name, []))] for name in names], dtype=np.float32)
    (summed,) = world.collective(f"{what}: summing the chunks' metrics", [mx.array(table)])
    return {name: float(total / count) if count else math.nan for name, (total, count) in zip(names, summed)}
