"""The tests here need llama.cpp's Python binding (the `llama_cpp` nox session builds it); without it they fail."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(autouse=True)
def llama_cpp_is_installed() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("tests/mlx_api/with_llama_cpp needs llama-cpp-python installed (run them in the llama_cpp session)")
