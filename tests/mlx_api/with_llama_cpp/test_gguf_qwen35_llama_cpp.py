"""Qwen 3.5, dense and MoE, exported to GGUF and run by llama.cpp's qwen35 / qwen35moe, continues a prompt as MLX does.

A tiny model of each (`QWEN35_FAMILIES` in `tools/kits/tiny_gguf_qwen35.py`: the published vision-language wrapper
around a 256-wide language model of gated delta-net and gated full-attention blocks) is LoRA-trained until it
answers, exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, held to the
bounds `test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_qwen35 import QWEN35_FAMILIES, build_qwen35_model

from .agreement import assert_agrees, trained_export
from .test_gguf_families_llama_cpp import EXPECTED, STEPS


@pytest.fixture(scope="module", params=list(QWEN35_FAMILIES))
def qwen35_export(request, tmp_path_factory):
    name = request.param
    root = tmp_path_factory.mktemp(f"qwen35-{name}")
    folder = build_qwen35_model(root / "model", name)
    return trained_export(folder, root, name, QWEN35_FAMILIES[name][1], list(EXPECTED), STEPS)


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_qwen3_5_as_mlx_does(qwen35_export, method):
    import gguf

    assert_agrees(qwen35_export, method, EXPECTED[method])  # the prompt's tokens: Qwen 3.5's own regex split them
    if method == "q4_k_m":  # the matrices really are Q4_K, not a 32-wide fallback
        reader = gguf.GGUFReader(str(qwen35_export["paths"][2]))
        assert "Q4_K" in {tensor.tensor_type.name for tensor in reader.tensors}
