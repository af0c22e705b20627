# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The error for a name only the MLX path provides, asked for while that path is off: it says why it is off.

`from unsloth import FastLanguageModel` gets an ImportError carrying the gate's reason and the switch; any other
lookup (`hasattr`, `getattr(unsloth, name, None)`) gets an AttributeError with the same text, as lookups expect.
"""

from __future__ import annotations

import dis
import sys
from typing import Optional

SWITCH = "UNSLOTH_MLX"


def message(name: str, reason: str) -> str:
    return (
        f"cannot import name {name!r} from 'unsloth': it comes from the MLX path, which is off here ({reason}). "
        f"Set {SWITCH}=1 (with mlx and unsloth_zoo installed) to switch it on, or use the CUDA build of unsloth"
    )


def _caller_is_from_import(depth: int = 3) -> bool:
    """True when the frame asking for the attribute is executing a `from unsloth import ...` statement."""
    try:
        frame: Optional[object] = sys._getframe(depth)
        code = frame.f_code.co_code  # type: ignore[union-attr]
        return dis.opname[code[frame.f_lasti]] == "IMPORT_FROM"  # type: ignore[union-attr]
    except (ValueError, IndexError, AttributeError):
        return False


def missing_name_error(name: str, reason: str) -> Exception:
    kind = ImportError if _caller_is_from_import() else AttributeError
    error = kind(message(name, reason))
    if isinstance(error, ImportError):
        error.name = "unsloth"
    return error
