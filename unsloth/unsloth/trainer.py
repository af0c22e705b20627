# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`unsloth.trainer`, the module path CUDA notebooks import `UnslothTrainer`, `UnslothTrainingArguments` and
`UnslothVisionDataCollator` from.

On the MLX path both come from `unsloth.mlx`; elsewhere this package has no trainer of its own, and importing
this module says why, with the gate's reason and the switch.
"""

from __future__ import annotations

import unsloth as _unsloth

if not _unsloth._ON_MLX:
    from .mlx.activation import message as _message

    raise ImportError(_message("UnslothTrainer", _unsloth._MLX_GATE_REASON))

from .mlx.training.arguments import UnslothTrainingArguments  # noqa: E402
from .mlx.training.trainer import UnslothTrainer  # noqa: E402
from .mlx.vision.collator import UnslothVisionDataCollator  # noqa: E402

__all__ = ["UnslothTrainer", "UnslothTrainingArguments", "UnslothVisionDataCollator"]
