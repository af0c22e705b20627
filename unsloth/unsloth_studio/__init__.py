# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Unsloth Studio's backend: dataset worker counts and the data preparation that uses them.

A top-level package of its own, so Studio never pays for importing `unsloth`; it reaches the dataset
worker-count policy only through `unsloth_num_proc.load_policy()`.
"""

from .caps import MULTI_GPU_NUM_PROC_CAP, STUDIO_NUM_PROC_CAP
from .fallback import safe_num_proc
from .num_proc import dataset_map_num_proc

__all__ = ["MULTI_GPU_NUM_PROC_CAP", "STUDIO_NUM_PROC_CAP", "dataset_map_num_proc", "safe_num_proc"]
