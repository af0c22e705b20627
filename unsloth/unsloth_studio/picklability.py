# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whether an object can be shipped to `datasets` worker processes."""

from __future__ import annotations

import pickle
from typing import Any


def _dumps() -> Any:
    try:
        import dill
    except ImportError:
        return pickle.dumps
    # datasets' worker pools come from `multiprocess`, which serialises with dill.
    return dill.dumps


def can_ship_to_workers(obj: Any) -> bool:
    """True when the pickler the worker pool uses (dill when installed, else pickle) accepts `obj`."""
    try:
        _dumps()(obj)
    except Exception:
        return False
    return True
