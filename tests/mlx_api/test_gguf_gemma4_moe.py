"""Gemma 4's mixture-of-experts block (26B-A4B, `enable_moe_block`) is written as llama.cpp's gemma4 loads it.

Names, shapes (ggml's order) and keys are read off llama.cpp's loader at the version llama-cpp-python 0.3.36 vendors
(`src/models/gemma4.cpp`): the router as `ffn_gate_inp` with its input scale as `ffn_gate_inp.scale`, the per-expert
output scale as `ffn_down_exps.scale`, the experts' stacked projections and the block's three extra norms.
"""

from __future__ import annotations

import numpy as np

from tools.kits.tiny_gguf_gemma4_moe import build_gemma4_moe_model

EMBD, EXPERTS, EXPERT_FF = 256, 4, 128


def test_the_expert_block_has_the_tensors_and_keys_llama_cpp_s_gemma4_loads(tmp_path):
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_gemma4_moe_model(tmp_path / "model")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    shapes = {name: [int(size) for size in tensor.shape] for name, tensor in tensors.items()}
    expected = {
        "blk.0.ffn_gate_inp.weight": [EMBD, EXPERTS],
        "blk.0.ffn_gate_inp.scale": [EMBD],
        "blk.0.ffn_gate_exps.weight": [EMBD, EXPERT_FF, EXPERTS],
        "blk.0.ffn_up_exps.weight": [EMBD, EXPERT_FF, EXPERTS],
        "blk.0.ffn_down_exps.weight": [EXPERT_FF, EMBD, EXPERTS],
        "blk.0.ffn_down_exps.scale": [EXPERTS],
        "blk.0.pre_ffw_norm_2.weight": [EMBD],
        "blk.0.post_ffw_norm_1.weight": [EMBD],
        "blk.0.post_ffw_norm_2.weight": [EMBD],
        "blk.0.ffn_gate.weight": [EMBD, 256],  # the dense MLP beside the experts
    }
    assert {name: shapes.get(name) for name in expected} == expected
    fields = {key: reader.fields[f"gemma4.{key}"].contents() for key in ("expert_count", "expert_used_count")}
    assert fields == {"expert_count": EXPERTS, "expert_used_count": 2}
    assert reader.fields["gemma4.expert_feed_forward_length"].contents() == EXPERT_FF
    source = mx.load(str(folder / "model.safetensors"))
    for tensor, weight in (("ffn_gate_inp.scale", "router.scale"), ("ffn_down_exps.scale", "router.per_expert_scale")):
        written = np.asarray(tensors[f"blk.1.{tensor}"].data, dtype=np.float32)
        np.testing.assert_array_equal(written, np.array(source[f"model.layers.1.{weight}"]))
