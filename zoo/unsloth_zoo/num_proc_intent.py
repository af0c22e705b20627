# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Auto intent on a config: configs resolve `dataset_num_proc` when built, so they record whether it was auto.

A map site then asks the policy again with the rows and closure it knows (`map_request`), instead of reading
a count decided before any row was known as an explicit request. `unsloth_num_proc` writes the same attribute.
"""

from __future__ import annotations

from typing import Any

INTENT_ATTRIBUTE = "unsloth_dataset_num_proc_intent"
# What a map site requests for "in-process" when the config's resolved value was an explicit serial.
IN_PROCESS_REQUEST = 1


def is_auto_request(request: Any) -> bool:
    """Whether the policy auto-sizes `request` (None, bools, floats, strings): anything but an int."""
    return not isinstance(request, int) or isinstance(request, bool)


def record_intent(config: Any, requested: Any) -> None:
    """Remember on `config` whether `requested` was auto, next to the value it resolved to."""
    try:
        setattr(config, INTENT_ATTRIBUTE, (is_auto_request(requested), getattr(config, "dataset_num_proc", None)))
    except Exception:  # a frozen or slotted config simply keeps its resolved value
        pass


def map_request(config: Any) -> Any:
    """What a map site asks the policy for this config: None for auto, else the explicit count (1 = in-process).

    A value assigned after the config was built is read as a fresh request.
    """
    value = getattr(config, "dataset_num_proc", None)
    intent = getattr(config, INTENT_ATTRIBUTE, None)
    if not (isinstance(intent, tuple) and len(intent) == 2 and intent[1] == value):
        return value
    was_auto, resolved = intent
    if was_auto:
        return None
    return IN_PROCESS_REQUEST if resolved is None else resolved
