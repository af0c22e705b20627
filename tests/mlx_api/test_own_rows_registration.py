# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The trainer, below `vision` in the layer order, learns of the vision collator's rows only by their registering:
importing any module of `vision` (`FastVisionModel`'s, the collator's, the backend GRPO uses) must register them."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHECK = """
import sys
from unsloth.mlx.training import trainer
from unsloth.mlx.training.own_rows import _REGISTERED
assert not _REGISTERED, _REGISTERED
assert "unsloth.mlx.vision.training" not in sys.modules
{trigger}
print(sorted(type(source).__name__ for source in _REGISTERED))
"""


@pytest.mark.parametrize(
    "trigger",
    [
        "import unsloth.mlx.vision.model",
        "from unsloth.mlx.vision.collator import UnslothVisionDataCollator as C\n"
        "try:\n    C(None, None, bogus=1)\nexcept Exception:\n    pass",
        "import unsloth.mlx.vision.backend",
    ],
    ids=["vision_model_module", "collator_built", "backend_module"],
)
def test_the_vision_rows_register_with_the_trainer(trigger: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK.format(trigger=trigger)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "['CollatedVisionRows', 'VisionOwnRows']"
