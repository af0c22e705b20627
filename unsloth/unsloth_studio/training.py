# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The SFT config Studio hands the trainer, with `dataset_num_proc` in the config encoding.

The trainer's own map reads `dataset_num_proc`: None there means "size it yourself", so in-process is
written as 1 wherever workers work, and a formatting function that cannot be pickled asks for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import unsloth_num_proc

from .num_proc import IN_PROCESS_REQUEST, dataset_map_num_proc
from .picklability import can_ship_to_workers


@dataclasses.dataclass
class StudioSFTConfig:
    """The dataset fields of the trainer config Studio builds (the names TRL's SFTConfig uses)."""

    dataset_text_field: str = "text"
    max_seq_length: int = 2048
    dataset_batch_size: int = 1000
    dataset_num_proc: Optional[int] = None


def training_num_proc_request(formatting_func: Optional[Callable]) -> Optional[int]:
    """None (auto) unless the formatting function cannot be pickled into workers, then 1 (in-process)."""
    if formatting_func is None or can_ship_to_workers(formatting_func):
        return None
    return IN_PROCESS_REQUEST


def build_sft_config(
    *, formatting_func: Optional[Callable] = None, rows: Optional[int] = None, **fields: Any
) -> StudioSFTConfig:
    """A StudioSFTConfig whose dataset_num_proc is decided for this host at the config layer.

    It records whether that was auto, so the trainer's map asks the policy again with the rows it maps.
    """
    request = training_num_proc_request(formatting_func)
    num_proc = dataset_map_num_proc(request, serial_as_none=False, rows=rows)
    config = StudioSFTConfig(**fields, dataset_num_proc=num_proc)
    unsloth_num_proc.record_intent(config, request)
    return config
