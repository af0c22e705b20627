# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The one place unsloth's trainer families call `Dataset.map`."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple

import unsloth_num_proc


def int_list_features(names: Sequence[str]) -> dict:
    """Features declaring each named column a list of int64."""
    import datasets

    return {name: datasets.Sequence(datasets.Value("int64")) for name in names}


def _declared_features(dataset: Any, remove: Sequence[str], int_list_columns: Tuple[str, ...]) -> Any:
    # A sized map casts an output column back to the type of a removed input column of the same name.
    if not int_list_columns or getattr(dataset, "features", None) is None:
        return None
    import datasets

    kept = {name: feature for name, feature in dataset.features.items() if name not in remove}
    return datasets.Features({**kept, **int_list_features(int_list_columns)})


def run_batched_map(
    dataset: Any,
    function: Callable[[dict], dict],
    num_proc_request: Any,
    *,
    remove_columns: Sequence[str] = (),
    int_list_columns: Tuple[str, ...] = (),
    desc: Optional[str] = None,
) -> Any:
    """`dataset.map(function, batched=True, ...)`, sized by the policy for `num_proc_request` (None = auto) and its rows.

    `int_list_columns` names output columns to declare as int lists, needed when one replaces an input column.
    """
    remove = [name for name in remove_columns if dataset.column_names is None or name in dataset.column_names]
    features = _declared_features(dataset, remove, int_list_columns)
    return unsloth_num_proc.sized_map(
        dataset, function, num_proc_request, batched=True, remove_columns=remove or None, features=features, desc=desc
    )
