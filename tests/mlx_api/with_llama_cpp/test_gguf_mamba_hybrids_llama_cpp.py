"""Falcon-H1 and Nemotron-H (dense and with experts), exported to GGUF and run by llama.cpp, continue a prompt as MLX
does.

A tiny model of each (`MAMBA_FAMILIES` in `tools/kits/tiny_gguf_mamba.py`, 256 wide so K-quant blocks fit; Falcon-H1
stored as the Hub ships it, every multiplier away from 1) is LoRA-trained until it answers, exported in f16, q8_0
and q4_k_m, and the three files are run by one fresh llama.cpp process, with the bounds of the first seven families.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_mamba import MAMBA_FAMILIES, build_mamba_family_model

from .agreement import assert_agrees, trained_export
from .test_gguf_families_llama_cpp import EXPECTED, STEPS


@pytest.fixture(scope="module", params=list(MAMBA_FAMILIES))
def family_export(request, tmp_path_factory):
    name = request.param
    root = tmp_path_factory.mktemp(f"mamba-{name}")
    folder = build_mamba_family_model(root / "model", name)
    return trained_export(folder, root, name, MAMBA_FAMILIES[name][1], list(EXPECTED), STEPS)


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_each_mamba_hybrid_as_mlx_does(family_export, method):
    assert_agrees(family_export, method, EXPECTED[method])
