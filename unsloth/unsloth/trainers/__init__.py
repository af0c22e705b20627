# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Trainer configs and dataset preparation, each map sized by the dataset worker-count policy.

`SFTConfig`, `DPOConfig`, `KTOConfig`, `RewardConfig`, `CPOConfig` and `ORPOConfig` are TRL's own classes
(patched by `unsloth.trl_patch` so `dataset_num_proc` goes through the policy), loaded on first use; without
`trl` they raise an ImportError naming `pip install trl`, and so does a name the installed trl no longer ships. `SFTDatasetConfig` and friends are unsloth's torch-free dataset-preparation configs.
"""

import importlib as _importlib

from .configs import (
    CPODatasetConfig,
    DatasetConfig,
    DPODatasetConfig,
    KTODatasetConfig,
    ORPODatasetConfig,
    PRMDatasetConfig,
    RewardDatasetConfig,
    SFTDatasetConfig,
)
from .preference import prepare_paired_preference_dataset
from .registry import TRAINER_FAMILIES, make_config, prepare_dataset
from .reward import prepare_reward_dataset
from .sft import prepare_sft_dataset
from .stepwise import IGNORE_INDEX, prepare_stepwise_dataset
from .unpaired import prepare_unpaired_dataset

# Where trl (1.16) keeps each config these names are; CPO and ORPO moved to trl.experimental, PRM is gone.
TRL_CONFIGS = {
    "SFTConfig": "trl",
    "DPOConfig": "trl",
    "KTOConfig": "trl",
    "RewardConfig": "trl",
    "CPOConfig": "trl.experimental.cpo",
    "ORPOConfig": "trl.experimental.orpo",
    "PRMConfig": "trl",
}

__all__ = [
    "CONFIG_LAYER",
    "CPODatasetConfig",
    "DATASET_NUM_PROC_LAYER",
    "DPODatasetConfig",
    "DatasetConfig",
    "IGNORE_INDEX",
    "KTODatasetConfig",
    "MAP_LAYER",
    "ORPODatasetConfig",
    "PRMDatasetConfig",
    "RewardDatasetConfig",
    "SFTDatasetConfig",
    "TRAINER_FAMILIES",
    "TRL_CONFIGS",
    "make_config",
    "prepare_dataset",
    "prepare_paired_preference_dataset",
    "prepare_reward_dataset",
    "prepare_sft_dataset",
    "prepare_stepwise_dataset",
    "prepare_unpaired_dataset",
]


# The policy's table of each family's encoding, read from whichever policy loads.
POLICY_NAMES = ("CONFIG_LAYER", "DATASET_NUM_PROC_LAYER", "MAP_LAYER")


def __getattr__(name: str):
    if name in POLICY_NAMES:
        import unsloth_num_proc

        policy = unsloth_num_proc.load_policy()
        if policy is None:
            raise AttributeError(f"{__name__}.{name} comes from the dataset worker-count policy, and none loads")
        return getattr(policy, name)
    if name not in TRL_CONFIGS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    own = f"unsloth's own torch-free config is unsloth.trainers.{name[: -len('Config')]}DatasetConfig"
    try:
        trl = _importlib.import_module("trl")
    except ImportError as error:
        raise ImportError(
            f"unsloth.trainers.{name} is TRL's {name}, and trl is not installed: pip install trl ({own})", name=name
        ) from error
    from ..trl_patch import patch_trl

    patch_trl(trl)
    try:
        value = getattr(_importlib.import_module(TRL_CONFIGS[name]), name)
    except (ImportError, AttributeError) as error:
        raise ImportError(
            f"trl {getattr(trl, '__version__', '?')} does not ship {name} (looked in {TRL_CONFIGS[name]}): "
            f"pip install a trl that does ({own})",
            name=name,
        ) from error
    globals()[name] = value
    return value
