# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Dataset-preparation configs of the trainer families; each resolves `dataset_num_proc` when built.

`dataset_num_proc` is the user's request when passed (None = auto-size, 0 or 1 = in-process,
n = n workers) and the policy's answer, in the encoding `encodings.DATASET_NUM_PROC_LAYER` gives
the family, once the config exists. With no policy loadable it is in-process in that encoding.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from .sizing import config_num_proc


@dataclasses.dataclass
class DatasetConfig:
    """Fields every family shares."""

    family: ClassVar[str] = ""
    dataset_num_proc: Optional[int] = None

    def __post_init__(self) -> None:
        self.dataset_num_proc = config_num_proc(self.family, self.dataset_num_proc)


@dataclasses.dataclass
class SFTConfig(DatasetConfig):
    family: ClassVar[str] = "sft"
    dataset_text_field: str = "text"
    max_length: Optional[int] = 1024
    # The older name of max_length; the zoo reads it first when set.
    max_seq_length: Optional[int] = None
    dataset_batch_size: int = 1000


@dataclasses.dataclass
class PairedPreferenceConfig(DatasetConfig):
    """prompt/chosen/rejected rows; prompts keep their last tokens, completions their first."""

    max_prompt_length: Optional[int] = None
    max_completion_length: Optional[int] = None


@dataclasses.dataclass
class DPOConfig(PairedPreferenceConfig):
    family: ClassVar[str] = "dpo"


@dataclasses.dataclass
class CPOConfig(PairedPreferenceConfig):
    family: ClassVar[str] = "cpo"


@dataclasses.dataclass
class ORPOConfig(PairedPreferenceConfig):
    family: ClassVar[str] = "orpo"


@dataclasses.dataclass
class KTOConfig(DatasetConfig):
    """prompt/completion/label rows."""

    family: ClassVar[str] = "kto"
    max_prompt_length: Optional[int] = None
    max_completion_length: Optional[int] = None


@dataclasses.dataclass
class RewardConfig(DatasetConfig):
    """chosen/rejected rows, each scored with its prompt in front when a prompt column exists."""

    family: ClassVar[str] = "reward"
    max_length: Optional[int] = None


@dataclasses.dataclass
class PRMConfig(DatasetConfig):
    """prompt/completions/labels rows: one completion string per reasoning step, one label per step."""

    family: ClassVar[str] = "prm"
    max_length: Optional[int] = None
    step_separator: str = "\n"
