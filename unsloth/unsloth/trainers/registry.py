# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Each trainer family's config class and dataset preparation, and `prepare_dataset` to dispatch on them."""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Type

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
from .reward import prepare_reward_dataset
from .sft import prepare_sft_dataset
from .stepwise import prepare_stepwise_dataset
from .unpaired import prepare_unpaired_dataset


class TrainerFamily(NamedTuple):
    config_class: Type[DatasetConfig]
    prepare: Callable[..., Any]


TRAINER_FAMILIES: Dict[str, TrainerFamily] = {
    "sft": TrainerFamily(SFTDatasetConfig, prepare_sft_dataset),
    "dpo": TrainerFamily(DPODatasetConfig, prepare_paired_preference_dataset),
    "kto": TrainerFamily(KTODatasetConfig, prepare_unpaired_dataset),
    "cpo": TrainerFamily(CPODatasetConfig, prepare_paired_preference_dataset),
    "orpo": TrainerFamily(ORPODatasetConfig, prepare_paired_preference_dataset),
    "reward": TrainerFamily(RewardDatasetConfig, prepare_reward_dataset),
    "prm": TrainerFamily(PRMDatasetConfig, prepare_stepwise_dataset),
}


def family_entry(family: str) -> TrainerFamily:
    """`family`'s config class and preparation; a KeyError names an unknown family."""
    try:
        return TRAINER_FAMILIES[family]
    except KeyError:
        raise KeyError(f"unknown trainer family {family!r}; known: {sorted(TRAINER_FAMILIES)}") from None


def make_config(family: str, **fields: Any) -> DatasetConfig:
    """A `family` config built from `fields`, its `dataset_num_proc` resolved."""
    return family_entry(family).config_class(**fields)


def prepare_dataset(family: str, dataset: Any, tokenizer: Any, config: Optional[DatasetConfig] = None) -> Any:
    """Tokenize `dataset` for `family`; a missing config is the family's defaults (auto-sized workers)."""
    entry = family_entry(family)
    if config is None:
        config = entry.config_class()
    elif not isinstance(config, entry.config_class):
        raise TypeError(f"{family} needs a {entry.config_class.__name__}, got {type(config).__name__}")
    return entry.prepare(dataset, tokenizer, config)
