"""Our K-quant files against llama.cpp's own quantizer: the same tensor types, byte for byte the same blocks.

For every family in the GGUF table, a tiny model is exported in float32 (what llama.cpp's quantizer is given) and
in every K-quant mix by our numpy writer; `llama_cpp.llama_model_quantize` then writes each mix from the float32
file, and the two files must hold the same tensors in the same types with the same bytes. Two shapes: rows of 256
and 512 over 10 layers (K-quant blocks, every use_more_bits layer pattern), and rows of 96 and 200 (llama.cpp's
32-wide fallback types, and F16 where 32 does not divide either). The families added later (lfm2, Granite 4.0-H
with and without experts, gpt-oss, Granite 3, Qwen 3 MoE) are checked in their own kit's 256-wide shape.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_families import GGUF_FAMILIES
from tools.kits.tiny_mlx_model import FAMILY_CONFIGS, TinyLlamaShape

SHAPES = {
    "super_blocks": TinyLlamaShape(vocab_size=512, hidden_size=256, num_hidden_layers=10, intermediate_size=512),
    "fallbacks": TinyLlamaShape(vocab_size=512, hidden_size=96, num_hidden_layers=3, intermediate_size=200),
}


def _tensors(path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {tensor.name: (tensor.tensor_type.name, tensor.data.tobytes()) for tensor in reader.tensors}


CASES = [(family, shape) for family in FAMILY_CONFIGS for shape in SHAPES]
CASES += [(family, "super_blocks") for family in GGUF_FAMILIES]


@pytest.fixture(scope="module", params=CASES)
def both_writers(request, tmp_path_factory):
    from unsloth import FastLanguageModel
    from unsloth.mlx.gguf.file_types import K_QUANT_MIXES, quantize_with_llama_cpp

    from tools.kits.tiny_gguf_families import build_gguf_family_model
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    family, shape = request.param
    root = tmp_path_factory.mktemp(f"kquants-{family}-{shape}")
    if family in GGUF_FAMILIES:
        folder = build_gguf_family_model(root / "model", family)
    else:
        folder = build_tiny_mlx_model(
            root / "model", SHAPES[shape], architecture=family, tokenizer_cache_dir=root.parent
        )
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    source = model.save_pretrained_gguf(str(root / "f32"), tokenizer, quantization_method="f32")
    ours = model.save_pretrained_gguf(str(root / "ours"), tokenizer, quantization_method=list(K_QUANT_MIXES))
    pairs = {}
    for method, path in zip(K_QUANT_MIXES, ours):
        theirs = root / f"llama_cpp.{method}.gguf"
        quantize_with_llama_cpp(source, theirs, method)
        pairs[method] = (_tensors(path), _tensors(theirs))
    return shape, pairs


@pytest.mark.parametrize(
    "method", ["q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"]
)
def test_every_tensor_matches_llama_cpps_quantizer(both_writers, method):
    shape, pairs = both_writers
    ours, theirs = pairs[method]
    assert sorted(ours) == sorted(theirs)
    assert {name: kind for name, (kind, _) in ours.items()} == {name: kind for name, (kind, _) in theirs.items()}
    differing = [name for name in theirs if ours[name][1] != theirs[name][1]]
    assert differing == []
    kinds = {kind for kind, _ in ours.values()}
    if shape == "super_blocks":  # the mix really is made of K-quant blocks here
        assert kinds & {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
    else:
        assert "F16" in kinds and kinds & {"Q4_0", "Q5_0", "Q5_1", "Q8_0"}
