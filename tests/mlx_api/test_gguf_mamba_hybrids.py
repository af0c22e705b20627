"""Falcon-H1's and Nemotron-H's GGUF files hold the tensors and keys llama.cpp's loader asks for, with Falcon-H1's
multipliers applied once.

Expected names and shapes are read off llama.cpp's loader (`src/models/falcon-h1.cpp`, `nemotron-h.cpp`,
llama-cpp-python 0.3.36) in ggml's order (innermost first). Falcon-H1's folder holds the Hub's unfolded weights, so
each value is checked against those times the multipliers mlx_lm folds in when it loads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_gguf_mamba import (
    FALCON_H1_MULTIPLIERS,
    falcon_h1_config,
    nemotron_h_config,
    nemotron_h_moe_config,
    store_as_the_hub_does,
)
from tools.kits.tiny_gguf_families import bias_expert_selection
from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

EMBD, VOCAB, INNER, STATE, HEADS, CONV = 256, 512, 512, 16, 8, 4
M = FALCON_H1_MULTIPLIERS


def _export(tmp_path: Path, config: dict) -> tuple:
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_tiny_hybrid_model(tmp_path / "model", config["model_type"], config=config)
    if config["model_type"] == "falcon_h1":
        store_as_the_hub_does(folder)
    bias_expert_selection(folder, 0)
    source = {name: np.array(value) for name, value in mx.load(str(folder / "model.safetensors")).items()}
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    return reader, {tensor.name: tensor for tensor in reader.tensors}, source


def _key(reader, key):
    return reader.fields[key].contents()


def _shapes(tensors) -> dict:
    return {name: [int(size) for size in tensor.shape] for name, tensor in tensors.items()}


def _data(tensors, name) -> np.ndarray:
    return np.asarray(tensors[name].data, dtype=np.float32)


def _ssm_keys(architecture: str, groups: int) -> dict:
    return {
        f"{architecture}.ssm.conv_kernel": CONV,
        f"{architecture}.ssm.state_size": STATE,
        f"{architecture}.ssm.group_count": groups,
        f"{architecture}.ssm.inner_size": INNER,
        f"{architecture}.ssm.time_step_rank": HEADS,
    }


def test_falcon_h1_has_both_mixers_in_every_block_and_its_multipliers_applied_once(tmp_path):
    reader, tensors, hub = _export(tmp_path, falcon_h1_config())
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "falcon-h1"
    expected = {**_ssm_keys("falcon-h1", 1), "falcon-h1.attention.head_count_kv": 2, "falcon-h1.vocab_size": VOCAB}
    assert {key: _key(reader, key) for key in expected} == expected
    assert "falcon-h1.attention.scale" not in reader.fields  # llama.cpp's default, 1/sqrt(head_dim), as mlx_lm's
    for layer in (0, 1):
        assert shapes[f"blk.{layer}.ssm_in.weight"] == [EMBD, 2 * INNER + 2 * STATE + HEADS]
        assert shapes[f"blk.{layer}.attn_k.weight"] == [EMBD, 128]
    assert shapes["blk.0.ssm_conv1d.weight"] == [CONV, INNER + 2 * STATE]
    assert shapes["blk.0.ssm_norm.weight"] == [INNER, 1]
    assert shapes["blk.0.ffn_norm"] == [EMBD]  # llama.cpp's falcon-h1 names this norm without a suffix
    embeddings = hub["model.embed_tokens.weight"] * M["embedding_multiplier"]
    np.testing.assert_allclose(_data(tensors, "token_embd.weight"), embeddings, rtol=1e-6)
    # The tied head's logits are scaled by lm_head / embedding multiplier in mlx_lm: an output matrix carries it.
    np.testing.assert_allclose(_data(tensors, "output.weight"), hub["model.embed_tokens.weight"] * 1.5, rtol=1e-5)
    rows = np.repeat(M["ssm_multipliers"], [INNER, INNER, STATE, STATE, HEADS])[:, None] * M["ssm_in_multiplier"]
    in_proj = hub["model.layers.0.mamba.in_proj.weight"] * rows.astype(np.float32)
    np.testing.assert_allclose(_data(tensors, "blk.0.ssm_in.weight"), in_proj, rtol=1e-5)
    # mlx_lm folds attention_in_multiplier into the keys but not key_multiplier, and runs the model so.
    keys = hub["model.layers.0.self_attn.k_proj.weight"] * M["attention_in_multiplier"]
    np.testing.assert_allclose(_data(tensors, "blk.0.attn_k.weight"), keys, rtol=1e-6)
    values = hub["model.layers.0.self_attn.v_proj.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.0.attn_v.weight"), values)
    pairs = {
        "blk.1.attn_output.weight": ("model.layers.1.self_attn.o_proj.weight", M["attention_out_multiplier"]),
        "blk.1.ssm_out.weight": ("model.layers.1.mamba.out_proj.weight", M["ssm_out_multiplier"]),
        "blk.1.ffn_gate.weight": ("model.layers.1.feed_forward.gate_proj.weight", M["mlp_multipliers"][0]),
        "blk.1.ffn_down.weight": ("model.layers.1.feed_forward.down_proj.weight", M["mlp_multipliers"][1]),
        "blk.1.ffn_up.weight": ("model.layers.1.feed_forward.up_proj.weight", 1.0),
    }
    for name, (weight, multiplier) in pairs.items():
        np.testing.assert_allclose(_data(tensors, name), hub[weight] * np.float32(multiplier), rtol=1e-6)
    conv = hub["model.layers.0.mamba.conv1d.weight"]  # the Hub's (channels, 1, kernel)
    np.testing.assert_array_equal(_data(tensors, "blk.0.ssm_conv1d.weight"), conv[:, 0, :])
    np.testing.assert_allclose(_data(tensors, "blk.0.ssm_a").ravel(), -np.exp(hub["model.layers.0.mamba.A_log"]))
    assert tensors["blk.0.ssm_conv1d.weight"].tensor_type.name == "F32"


def test_falcon_h1_untied_keeps_its_folded_head_and_gets_zero_conv_biases_and_no_norm(tmp_path):
    config = {**falcon_h1_config(), "tie_word_embeddings": False, "mamba_conv_bias": False, "mamba_rms_norm": False}
    _, tensors, hub = _export(tmp_path, config)
    np.testing.assert_allclose(_data(tensors, "output.weight"), hub["lm_head.weight"] * 1.5, rtol=1e-6)
    # llama.cpp's Mamba 2 graph adds a convolution bias whatever the file holds: a model without one gets zeros.
    np.testing.assert_array_equal(_data(tensors, "blk.0.ssm_conv1d.bias"), np.zeros(INNER + 2 * STATE))
    assert "blk.0.ssm_norm.weight" not in tensors  # llama.cpp skips the gated norm without it, as mlx_lm does


def test_nemotron_h_marks_each_block_kind_by_its_kv_heads_and_feed_forward_width(tmp_path):
    reader, tensors, source = _export(tmp_path, nemotron_h_config())
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "nemotron_h"
    assert {key: _key(reader, key) for key in _ssm_keys("nemotron_h", 2)} == _ssm_keys("nemotron_h", 2)
    # M, -, *, -: Mamba has neither, attention only heads, the MLPs only a width.
    assert list(_key(reader, "nemotron_h.attention.head_count_kv")) == [0, 0, 2, 0]
    assert list(_key(reader, "nemotron_h.feed_forward_length")) == [0, 512, 0, 512]
    assert _key(reader, "nemotron_h.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert _key(reader, "nemotron_h.attention.layer_norm_epsilon") == pytest.approx(1e-5)
    assert shapes["blk.0.ssm_norm.weight"] == [INNER // 2, 2]  # normed per group
    norm = source["backbone.layers.0.mixer.norm.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.0.ssm_norm.weight"), norm.reshape(2, -1))
    assert shapes["blk.1.ffn_up.weight"] == [EMBD, 512] and "blk.1.ffn_gate.weight" not in shapes
    assert shapes["blk.2.attn_q.weight"] == [EMBD, EMBD] and shapes["blk.2.attn_k.weight"] == [EMBD, 128]
    assert shapes["output.weight"] == [EMBD, VOCAB] and "token_embd.weight" in shapes
    np.testing.assert_array_equal(_data(tensors, "token_embd.weight"), source["backbone.embeddings.weight"])
    assert {name.split(".")[1] for name in shapes if ".attn_norm." in name} == {"0", "1", "2", "3"}


def test_nemotron_h_has_as_many_blocks_as_its_pattern_whatever_num_hidden_layers_says(tmp_path):
    reader, tensors, _ = _export(tmp_path, {**nemotron_h_config(), "num_hidden_layers": 2})  # mlx_lm builds 4
    assert _key(reader, "nemotron_h.block_count") == 4
    assert "blk.3.ffn_down.weight" in tensors


def test_nemotron_h_with_experts_is_nemotron_h_moe_with_its_routing_keys(tmp_path):
    reader, tensors, source = _export(tmp_path, nemotron_h_moe_config())
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "nemotron_h_moe"
    expected = {
        "nemotron_h_moe.expert_count": 4,
        "nemotron_h_moe.expert_used_count": 2,
        "nemotron_h_moe.expert_feed_forward_length": EMBD,
        "nemotron_h_moe.expert_shared_feed_forward_length": EMBD,
        "nemotron_h_moe.expert_weights_norm": True,
        "nemotron_h_moe.expert_weights_scale": 1.5,
    }
    assert {key: _key(reader, key) for key in expected} == expected
    assert list(_key(reader, "nemotron_h_moe.feed_forward_length")) == [0, EMBD, 0, EMBD]
    assert shapes["blk.1.ffn_gate_inp.weight"] == [EMBD, 4]
    assert shapes["blk.1.ffn_up_exps.weight"] == [EMBD, EMBD, 4]
    assert shapes["blk.1.ffn_down_exps.weight"] == [EMBD, EMBD, 4]
    assert shapes["blk.3.ffn_up_shexp.weight"] == [EMBD, EMBD]
    bias = source["backbone.layers.1.mixer.gate.e_score_correction_bias"]
    assert np.abs(bias).max() > 0  # the kit gave the selection bias values, so a lost one shows
    np.testing.assert_array_equal(_data(tensors, "blk.1.exp_probs_b.bias"), bias)
    up = source["backbone.layers.3.mixer.switch_mlp.fc1.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.3.ffn_up_exps.weight"), up)
    assert tensors["blk.1.ffn_gate_inp.weight"].tensor_type.name == "F32"


@pytest.mark.parametrize(
    "config, message",
    [
        ({**falcon_h1_config(), "mamba_proj_bias": True}, "falcon-h1 has no Mamba projection biases"),
        ({**falcon_h1_config(), "projectors_bias": True}, "falcon-h1 has no Mamba projection biases"),
        ({**falcon_h1_config(), "attention_bias": True}, "falcon-h1 drops o_proj's bias"),
        ({**falcon_h1_config(), "mamba_norm_before_gate": True}, "gates the Mamba output before its norm"),
        ({**falcon_h1_config(), "mamba_n_groups": 2}, "mlx_lm norms the whole Mamba output at once"),
        ({**falcon_h1_config(), "mamba_d_ssm": 256}, "mamba_d_ssm other than mamba_n_heads"),
        ({**nemotron_h_config(), "mamba_proj_bias": True}, "nemotron_h with mamba_proj_bias=True"),
        ({**nemotron_h_config(), "time_step_limit": [0.001, 100.0]}, "llama.cpp's scan never clips the step"),
        ({**nemotron_h_moe_config(), "n_shared_experts": None}, "nemotron_h_moe needs one"),
        ({**nemotron_h_moe_config(), "mlp_bias": True}, "nemotron_h with experts and mlp_bias=True"),
        ({**nemotron_h_moe_config(), "n_group": 2, "topk_group": 1}, "nemotron_h_moe reads no groups"),
    ],
)
def test_settings_llama_cpp_does_not_reproduce_are_refused_by_name(config, message):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    with pytest.raises(UnsupportedModel, match=message):
        family_for(json.loads(json.dumps(config)))


@pytest.mark.parametrize("config", [falcon_h1_config(), nemotron_h_config(), nemotron_h_moe_config()])
def test_the_kits_own_settings_are_not_refused(config):
    from unsloth.mlx.gguf.convert import family_for

    assert family_for(config).architecture in ("falcon-h1", "nemotron_h", "nemotron_h_moe")
