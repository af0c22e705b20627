# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which `dataset_num_proc` encoding each trainer family's config writes: the one table that says so.

"config": in-process is written as 1 while worker processes are usable (None means "auto-size me"),
because that value goes to the zoo's `sft_prepare_dataset`, which auto-sizes a None.
"map": in-process is written as None, because that value goes straight to `Dataset.map`,
where from datasets 4.1.0 on `num_proc=1` builds a one-worker pool.
"""

from __future__ import annotations

from typing import Optional

CONFIG_LAYER = "config"
MAP_LAYER = "map"

DATASET_NUM_PROC_LAYER = {
    "sft": CONFIG_LAYER,
    "dpo": MAP_LAYER,
    "kto": MAP_LAYER,
    "cpo": MAP_LAYER,
    "orpo": MAP_LAYER,
    "reward": MAP_LAYER,
    "prm": MAP_LAYER,
}


def layer_of(family: str) -> str:
    """The encoding `family`'s config writes; a KeyError names an unknown family."""
    try:
        return DATASET_NUM_PROC_LAYER[family]
    except KeyError:
        raise KeyError(f"unknown trainer family {family!r}; known: {sorted(DATASET_NUM_PROC_LAYER)}") from None


def in_process_value(layer: str) -> Optional[int]:
    """How `layer` writes "run in the main process" when no policy can say more."""
    return 1 if layer == CONFIG_LAYER else None
