"""Qwen 3.5's GGUF files (dense and MoE) hold the tensors and keys llama.cpp's qwen35 / qwen35moe loaders ask for.

Expected names and shapes are read off llama.cpp's loader at the version llama-cpp-python 0.3.36 vendors
(`src/models/qwen35.cpp`, `qwen35moe.cpp`), in ggml's order (innermost first), for unequal sizes so a transposed
tensor cannot pass. Values are checked against the model folder's weights with the transforms written out here:
A = -exp(A_log), the convolution's trailing axis dropped, and the value heads moved from grouped by key head
(mlx_lm's repeat) to tiled (llama.cpp's broadcast).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_gguf_qwen35 import build_qwen35_model, qwen3_5_config, qwen3_5_moe_config

EMBD, HEAD, FF = 64, 24, 96
# Two key heads, each shared by two value heads of 16: grouped [k0v0, k0v1, k1v0, k1v1] becomes tiled as below.
KEY_HEADS, VALUE_HEADS, LINEAR_HEAD, TILED = 2, 4, 16, [0, 2, 1, 3]
KEY_DIM, VALUE_DIM = KEY_HEADS * LINEAR_HEAD, VALUE_HEADS * LINEAR_HEAD
_SMALL = {
    "hidden_size": EMBD,
    "intermediate_size": FF,
    "num_hidden_layers": 2,
    "head_dim": HEAD,
    "linear_key_head_dim": LINEAR_HEAD,
    "linear_value_head_dim": LINEAR_HEAD,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [1, 1, 1],
    },
}


def _small(config: dict, **text) -> dict:
    return {**config, "text_config": {**config["text_config"], **_SMALL, **text}}


def _export(tmp_path: Path, config: dict) -> tuple:
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_qwen35_model(tmp_path / "model", config["model_type"], config=config)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    weights = mx.load(str(folder / "model.safetensors"))
    source = {name.removeprefix("language_model."): np.array(value) for name, value in weights.items()}
    return reader, tensors, source


def _keys(reader, architecture: str, names) -> dict:
    return {name: reader.fields[f"{architecture}.{name}"].contents() for name in names}


def _shapes(tensors) -> dict:
    return {name: [int(size) for size in tensor.shape] for name, tensor in tensors.items()}


def _data(tensors, name) -> np.ndarray:
    return np.asarray(tensors[name].data, dtype=np.float32)


def _heads(data: np.ndarray, width: int, order, axis: int = 0) -> np.ndarray:
    """`data`'s heads of `width` along `axis`, in `order`."""
    split = np.split(data, data.shape[axis] // width, axis=axis)
    return np.concatenate([split[head] for head in order], axis=axis)


def test_dense_qwen3_5_writes_delta_net_and_gated_attention_as_llama_cpp_loads_them(tmp_path):
    reader, tensors, source = _export(tmp_path, _small(qwen3_5_config()))
    shapes = _shapes(tensors)
    assert reader.fields["general.architecture"].contents() == "qwen35"
    assert _keys(reader, "qwen35", ["ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank"]) == {
        "ssm.conv_kernel": 4,
        "ssm.state_size": LINEAR_HEAD,
        "ssm.group_count": KEY_HEADS,
        "ssm.time_step_rank": VALUE_HEADS,
    }
    assert _keys(reader, "qwen35", ["ssm.inner_size", "full_attention_interval", "rope.dimension_count"]) == {
        "ssm.inner_size": VALUE_DIM,
        "full_attention_interval": 2,
        "rope.dimension_count": 6,  # a quarter of the 24-wide head
    }
    assert list(reader.fields["qwen35.rope.dimension_sections"].contents()) == [1, 1, 1, 0]
    assert reader.fields["qwen35.rope.freq_base"].contents() == pytest.approx(5000.0)
    assert reader.fields["qwen35.attention.key_length"].contents() == HEAD
    assert reader.fields["qwen35.attention.head_count_kv"].contents() == 2
    conv = 2 * KEY_DIM + VALUE_DIM
    assert shapes["blk.0.attn_qkv.weight"] == [EMBD, conv]
    assert shapes["blk.0.attn_gate.weight"] == [EMBD, VALUE_DIM]
    assert shapes["blk.0.ssm_conv1d.weight"] == [4, conv]
    assert shapes["blk.0.ssm_alpha.weight"] == [EMBD, VALUE_HEADS] == shapes["blk.0.ssm_beta.weight"]
    assert shapes["blk.0.ssm_a"] == [VALUE_HEADS] == shapes["blk.0.ssm_dt.bias"]
    assert shapes["blk.0.ssm_norm.weight"] == [LINEAR_HEAD]
    assert shapes["blk.0.ssm_out.weight"] == [VALUE_DIM, EMBD]
    assert shapes["blk.0.post_attention_norm.weight"] == [EMBD]
    assert "blk.0.attn_q.weight" not in shapes and "blk.1.attn_qkv.weight" not in shapes
    assert shapes["blk.1.attn_q.weight"] == [EMBD, 2 * 4 * HEAD]  # each head's query then its gate
    assert shapes["blk.1.attn_k.weight"] == [EMBD, 2 * HEAD]
    assert shapes["blk.1.attn_q_norm.weight"] == [HEAD]
    assert shapes["blk.1.ffn_down.weight"] == [FF, EMBD] and shapes["output.weight"] == [EMBD, 512]
    linear = "model.layers.0.linear_attn."
    qkv = source[linear + "in_proj_qkv.weight"]
    expected = np.concatenate([qkv[: 2 * KEY_DIM], _heads(qkv[2 * KEY_DIM :], LINEAR_HEAD, TILED)])
    np.testing.assert_array_equal(_data(tensors, "blk.0.attn_qkv.weight"), expected)
    kernel = source[linear + "conv1d.weight"].reshape(conv, 4)
    expected = np.concatenate([kernel[: 2 * KEY_DIM], _heads(kernel[2 * KEY_DIM :], LINEAR_HEAD, TILED)])
    np.testing.assert_array_equal(_data(tensors, "blk.0.ssm_conv1d.weight"), expected)
    for name, gguf_name in (("in_proj_z.weight", "attn_gate.weight"), ("out_proj.weight", "ssm_out.weight")):
        axis = 1 if name.startswith("out") else 0
        expected = _heads(source[linear + name], LINEAR_HEAD, TILED, axis)
        np.testing.assert_array_equal(_data(tensors, f"blk.0.{gguf_name}"), expected)
    for name, gguf_name in (("in_proj_a.weight", "ssm_alpha.weight"), ("in_proj_b.weight", "ssm_beta.weight")):
        np.testing.assert_array_equal(_data(tensors, f"blk.0.{gguf_name}"), source[linear + name][TILED])
    np.testing.assert_allclose(_data(tensors, "blk.0.ssm_a"), -np.exp(source[linear + "A_log"][TILED]), rtol=1e-6)
    np.testing.assert_array_equal(_data(tensors, "blk.0.ssm_dt.bias"), source[linear + "dt_bias"][TILED])
    query = source["model.layers.1.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.1.attn_q.weight"), query)  # per-head gate rows stay in place
    for name in ("blk.0.ssm_conv1d.weight", "blk.0.ssm_a", "blk.0.ssm_norm.weight"):
        assert tensors[name].tensor_type.name == "F32"


def test_qwen3_5_moe_writes_experts_and_the_shared_experts_gate_as_a_vector(tmp_path):
    config = _small(qwen3_5_moe_config(), moe_intermediate_size=40, shared_expert_intermediate_size=56)
    reader, tensors, source = _export(tmp_path, config)
    shapes = _shapes(tensors)
    assert reader.fields["general.architecture"].contents() == "qwen35moe"
    names = ["expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"]
    assert _keys(reader, "qwen35moe", names) == dict(zip(names, [4, 2, 40, 56]))
    assert _keys(reader, "qwen35moe", ["ssm.time_step_rank"]) == {"ssm.time_step_rank": VALUE_HEADS}
    for layer in (0, 1):
        assert shapes[f"blk.{layer}.ffn_gate_inp.weight"] == [EMBD, 4]
        assert shapes[f"blk.{layer}.ffn_gate_exps.weight"] == [EMBD, 40, 4]
        assert shapes[f"blk.{layer}.ffn_down_exps.weight"] == [40, EMBD, 4]
        assert shapes[f"blk.{layer}.ffn_up_shexp.weight"] == [EMBD, 56]
        assert shapes[f"blk.{layer}.ffn_gate_inp_shexp.weight"] == [EMBD]
        assert f"blk.{layer}.ffn_gate.weight" not in shapes
    gate = source["model.layers.1.mlp.shared_expert_gate.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.1.ffn_gate_inp_shexp.weight"), gate.reshape(EMBD))
    assert tensors["blk.1.ffn_gate_inp.weight"].tensor_type.name == "F32"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (_small(qwen3_5_config(), linear_value_head_dim=32), "linear_key_head_dim 16 != linear_value_head_dim 32"),
        (_small(qwen3_5_moe_config(), norm_topk_prob=False), "qwen3_5_moe_text with norm_topk_prob=False"),
        (_small(qwen3_5_config(), attention_bias=True), "attention_bias=True"),
        (
            _small(qwen3_5_config(), rope_parameters={**_SMALL["rope_parameters"], "mrope_section": [1, 1, 0]}),
            "mrope_section covering 4 of its 6 rotary dimensions",
        ),
        (
            _small(qwen3_5_config(), rope_parameters={**_SMALL["rope_parameters"], "rope_type": "yarn", "factor": 2.0}),
            "rope type 'yarn'",
        ),
    ],
)
def test_qwen3_5_settings_llama_cpp_would_run_apart_are_refused_by_name(config, words):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for
    from unsloth.mlx.gguf.families import unwrap_text_model

    with pytest.raises(UnsupportedModel, match=words):
        family_for(unwrap_text_model(config)[0])


def test_a_flat_qwen3_5_config_is_read_as_its_language_model():
    from unsloth.mlx.gguf.convert import family_for
    from unsloth.mlx.gguf.families import unwrap_text_model

    flat = {**qwen3_5_config()["text_config"], "model_type": "qwen3_5"}
    config, weights = unwrap_text_model(flat, {"language_model.model.norm.weight": 1})
    assert config["model_type"] == "qwen3_5_text" and config["linear_num_value_heads"] == VALUE_HEADS
    assert list(weights) == ["model.norm.weight"]
    assert family_for(config).architecture == "qwen35"


def test_qwen3_5s_own_splitting_regex_is_written_as_llama_cpps_qwen35_pre_tokenizer():
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX

    from unsloth.mlx.gguf.tokenizer import byte_level_pre_name

    split = {"type": "Split", "pattern": {"Regex": PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False}
    pre = {"type": "Sequence", "pretokenizers": [split, {"type": "ByteLevel", "use_regex": False}]}
    assert byte_level_pre_name(pre) == "qwen35"
