"""The tests in this folder need the CPU torch (`pip install torch==2.13.0`); without it they fail, never skip."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(autouse=True)
def torch_is_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("tests/mlx_api/with_torch needs torch installed (run them in the mlx_torch session)")
