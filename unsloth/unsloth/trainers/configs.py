# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The torch-free dataset-preparation configs of unsloth's own trainer families (`SFTDatasetConfig`, ...).

They are not TRL's configs: `unsloth.trainers.SFTConfig` and friends are TRL's own (patched), see `__init__`.
`dataset_num_proc` is the user's request when passed (None = auto-size, 0 or 1 = in-process,
n = n workers) and the policy's answer, in the encoding the policy's `DATASET_NUM_PROC_LAYER` gives
the family, once the config exists; the config also records whether the request was auto, so each
map site asks again with its rows. With no policy loadable it is None (in-process).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import unsloth_num_proc


@dataclasses.dataclass
class DatasetConfig:
    """Fields every family shares."""

    family: ClassVar[str] = ""
    dataset_num_proc: Optional[int] = None

    def __post_init__(self) -> None:
        requested = self.dataset_num_proc
        self.dataset_num_proc = unsloth_num_proc.config_num_proc(requested, self.family)
        unsloth_num_proc.record_intent(self, requested)


@dataclasses.dataclass
class SFTDatasetConfig(DatasetConfig):
    family: ClassVar[str] = "sft"
    dataset_text_field: str = "text"
    max_length: Optional[int] = 1024
    # The older name of max_length; the zoo reads it first when set.
    max_seq_length: Optional[int] = None
    dataset_batch_size: int = 1000


@dataclasses.dataclass
class PairedPreferenceDatasetConfig(DatasetConfig):
    """prompt/chosen/rejected rows; prompts keep their last tokens, completions their first."""

    max_prompt_length: Optional[int] = None
    max_completion_length: Optional[int] = None


@dataclasses.dataclass
class DPODatasetConfig(PairedPreferenceDatasetConfig):
    family: ClassVar[str] = "dpo"


@dataclasses.dataclass
class CPODatasetConfig(PairedPreferenceDatasetConfig):
    family: ClassVar[str] = "cpo"


@dataclasses.dataclass
class ORPODatasetConfig(PairedPreferenceDatasetConfig):
    family: ClassVar[str] = "orpo"


@dataclasses.dataclass
class KTODatasetConfig(DatasetConfig):
    """prompt/completion/label rows."""

    family: ClassVar[str] = "kto"
    max_prompt_length: Optional[int] = None
    max_completion_length: Optional[int] = None


@dataclasses.dataclass
class RewardDatasetConfig(DatasetConfig):
    """chosen/rejected rows, each scored with its prompt in front when a prompt column exists."""

    family: ClassVar[str] = "reward"
    max_length: Optional[int] = None


@dataclasses.dataclass
class PRMDatasetConfig(DatasetConfig):
    """prompt/completions/labels rows: one completion string per reasoning step, one label per step."""

    family: ClassVar[str] = "prm"
    max_length: Optional[int] = None
    step_separator: str = "\n"
