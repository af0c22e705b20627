"""Gemma 3n, exported as gemma3n, run by llama.cpp as MLX runs it: AltUp, Laurel, per-layer inputs, sparse MLPs.

The tiny model of `tools/kits/tiny_gguf_gemma3n.py` (the published wrapper around a 256-wide text model, AltUp's
output scales drawn away from mlx_lm's zeros so the per-layer inputs count) is LoRA-trained until it answers,
exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_gemma3n import build_gemma3n_model

from .agreement import assert_agrees, trained_export
from .test_gguf_families_llama_cpp import EXPECTED, STEPS

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def gemma3n_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma3n")
    return trained_export(build_gemma3n_model(root / "model"), root, "gemma3n_text", TARGETS, list(EXPECTED), STEPS)


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_gemma3n_as_mlx_does(gemma3n_export, method):
    assert_agrees(gemma3n_export, method, EXPECTED[method])
