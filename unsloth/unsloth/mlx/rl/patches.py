# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`PatchDPOTrainer()` and `PatchFastRL(...)`: the calls RL notebooks make before building a trainer.

On CUDA they rewrite TRL's trainers in place. On MLX, `from trl import DPOTrainer, ...` already gives the MLX trainers
(compat/trl_shim.py), so both calls only check their arguments and change nothing.
"""

from __future__ import annotations

from typing import Any, Optional


def PatchDPOTrainer() -> None:  # noqa: N802  (the name notebooks import)
    """Nothing to patch on MLX: TRL's DPO and ORPO names already are the MLX trainers."""


def PatchFastRL(algorithm: Optional[str] = None, FastLanguageModel: Any = None) -> None:  # noqa: N802, N803
    """Nothing to patch on MLX: TRL's GRPO, DPO and ORPO names already are the MLX trainers."""
    if algorithm is not None and not isinstance(algorithm, str):
        raise TypeError(f"PatchFastRL(algorithm=...) takes a name such as 'GRPO', got {type(algorithm).__name__}")
