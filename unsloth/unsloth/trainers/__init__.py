# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Trainer-family configs and dataset preparation, each map sized by the dataset worker-count policy."""

from .configs import CPOConfig, DatasetConfig, DPOConfig, KTOConfig, ORPOConfig, PRMConfig, RewardConfig, SFTConfig
from .encodings import CONFIG_LAYER, DATASET_NUM_PROC_LAYER, MAP_LAYER
from .preference import prepare_paired_preference_dataset
from .registry import TRAINER_FAMILIES, make_config, prepare_dataset
from .reward import prepare_reward_dataset
from .sft import prepare_sft_dataset
from .stepwise import IGNORE_INDEX, prepare_stepwise_dataset
from .unpaired import prepare_unpaired_dataset

__all__ = [
    "CONFIG_LAYER",
    "CPOConfig",
    "DATASET_NUM_PROC_LAYER",
    "DPOConfig",
    "DatasetConfig",
    "IGNORE_INDEX",
    "KTOConfig",
    "MAP_LAYER",
    "ORPOConfig",
    "PRMConfig",
    "RewardConfig",
    "SFTConfig",
    "TRAINER_FAMILIES",
    "make_config",
    "prepare_dataset",
    "prepare_paired_preference_dataset",
    "prepare_reward_dataset",
    "prepare_sft_dataset",
    "prepare_stepwise_dataset",
    "prepare_unpaired_dataset",
]
