"""Gemma 4 with its expert block (26B-A4B's layout), exported as gemma4, run by llama.cpp as MLX runs it.

The tiny model of `tools/kits/tiny_gguf_gemma4_moe.py` (router scales drawn away from one) is LoRA-trained until it
answers, exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_gemma4_moe import build_gemma4_moe_model

from .agreement import assert_agrees, trained_export
from .test_gguf_families_llama_cpp import EXPECTED, STEPS

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def moe_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma4-moe")
    return trained_export(
        build_gemma4_moe_model(root / "model"), root, "gemma4_text MoE", TARGETS, list(EXPECTED), STEPS
    )


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_gemma4_s_expert_block_as_mlx_does(moe_export, method):
    assert_agrees(moe_export, method, EXPECTED[method])
