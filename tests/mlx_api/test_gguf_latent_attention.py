"""GLM-4.7-Flash's latent attention (`glm4_moe_lite`) is written as llama.cpp's deepseek2 loads it.

Expected names, shapes (ggml's order, innermost first) and keys are read off llama.cpp's loader at the version
llama-cpp-python 0.3.36 vendors (`src/models/deepseek2.cpp`). The tiny config's widths all differ (latent 64,
rotated 16, unrotated 32, value 40, query rank 96), so a transposed or swapped per-head matrix cannot pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_gguf_mla import build_mla_model, deepseek_v2_config, deepseek_v3_config, glm4_moe_lite_config

EMBD, HEADS, LATENT, ROPE, NOPE, VALUE, Q_RANK = 64, 4, 64, 16, 32, 40, 96
SMALL = {"hidden_size": EMBD, "intermediate_size": 96, "moe_intermediate_size": 32}


def _export(tmp_path: Path, family: str = "glm4_moe_lite", **overrides) -> tuple:
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_mla_model(tmp_path / "model", family, **{**SMALL, **overrides})
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    source = {name: np.array(value) for name, value in mx.load(str(folder / "model.safetensors")).items()}
    return reader, tensors, source


def _key(reader, key):
    return reader.fields[key].contents()


def test_latent_attention_tensors_have_the_shapes_llama_cpp_s_deepseek2_loads(tmp_path):
    reader, tensors, source = _export(tmp_path)
    shapes = {name: [int(size) for size in tensor.shape] for name, tensor in tensors.items()}
    assert _key(reader, "general.architecture") == "deepseek2"
    expected = {
        "blk.0.attn_q_a.weight": [EMBD, Q_RANK],
        "blk.0.attn_q_a_norm.weight": [Q_RANK],
        "blk.0.attn_q_b.weight": [Q_RANK, HEADS * (NOPE + ROPE)],
        "blk.0.attn_kv_a_mqa.weight": [EMBD, LATENT + ROPE],
        "blk.0.attn_kv_a_norm.weight": [LATENT],
        "blk.0.attn_k_b.weight": [NOPE, LATENT, HEADS],
        "blk.0.attn_v_b.weight": [LATENT, VALUE, HEADS],
        "blk.0.attn_output.weight": [HEADS * VALUE, EMBD],
        "blk.0.ffn_gate.weight": [EMBD, 96],  # first_k_dense_replace=1: layer 0 is dense
        "blk.1.ffn_gate_inp.weight": [EMBD, 4],
        "blk.1.exp_probs_b.bias": [4],
        "blk.1.ffn_down_exps.weight": [32, EMBD, 4],
        "blk.1.ffn_up_shexp.weight": [EMBD, 32],
        "output.weight": [EMBD, 512],
    }
    assert {name: shapes.get(name) for name in expected} == expected
    assert not [name for name in shapes if "kv_b" in name or name.startswith("blk.2.")]
    for layer in (0, 1):
        attention = f"model.layers.{layer}.self_attn"
        # llama.cpp multiplies the unrotated query part by attn_k_b and the latent by attn_v_b, head by head, as
        # mlx_lm's embed_q and unembed_out do: the same (heads, out, in) arrays.
        k_b = np.asarray(tensors[f"blk.{layer}.attn_k_b.weight"].data).reshape(HEADS, LATENT, NOPE)
        v_b = np.asarray(tensors[f"blk.{layer}.attn_v_b.weight"].data).reshape(HEADS, VALUE, LATENT)
        np.testing.assert_array_equal(k_b, source[f"{attention}.embed_q.weight"])
        np.testing.assert_array_equal(v_b, source[f"{attention}.unembed_out.weight"])


def test_latent_attention_keys_describe_one_shared_latent_head_and_sigmoid_routing(tmp_path):
    reader, _, _ = _export(tmp_path)
    keys = {
        "attention.head_count": HEADS,
        "attention.head_count_kv": 1,
        "attention.key_length": LATENT + ROPE,
        "attention.value_length": LATENT,
        "attention.key_length_mla": NOPE + ROPE,
        "attention.value_length_mla": VALUE,
        "attention.q_lora_rank": Q_RANK,
        "attention.kv_lora_rank": LATENT,
        "rope.dimension_count": ROPE,
        "leading_dense_block_count": 1,
        "expert_count": 4,
        "expert_used_count": 2,
        "expert_shared_count": 1,
        "expert_feed_forward_length": 32,
        "feed_forward_length": 96,
        "vocab_size": 512,
    }
    assert {key: _key(reader, f"deepseek2.{key}") for key in keys} == keys
    assert _key(reader, "deepseek2.expert_weights_scale") == pytest.approx(1.5)
    assert _key(reader, "deepseek2.expert_weights_norm") is True
    assert _key(reader, "deepseek2.expert_gating_func") == 2  # sigmoid, not the softmax llama.cpp assumes unset
    assert "deepseek2.rope.scaling.type" not in reader.fields


def test_a_plain_query_projection_is_written_with_a_zero_query_rank(tmp_path):
    reader, tensors, _ = _export(tmp_path, q_lora_rank=None)
    assert _key(reader, "deepseek2.attention.q_lora_rank") == 0  # llama.cpp then reads attn_q
    assert [int(size) for size in tensors["blk.0.attn_q.weight"].shape] == [EMBD, HEADS * (NOPE + ROPE)]
    assert "blk.0.attn_q_a.weight" not in tensors


def test_deepseek_v3_takes_the_same_path_with_its_expert_groups(tmp_path):
    reader, tensors, source = _export(tmp_path, "deepseek_v3")
    assert _key(reader, "general.architecture") == "deepseek2"
    assert _key(reader, "deepseek2.expert_count") == 8
    assert _key(reader, "deepseek2.expert_group_count") == 2  # llama.cpp keeps the best topk_group groups
    assert _key(reader, "deepseek2.expert_group_used_count") == 1
    assert _key(reader, "deepseek2.expert_gating_func") == 2
    assert _key(reader, "deepseek2.attention.q_lora_rank") == 0
    k_b = np.asarray(tensors["blk.1.attn_k_b.weight"].data).reshape(HEADS, LATENT, NOPE)
    np.testing.assert_array_equal(k_b, source["model.layers.1.self_attn.embed_q.weight"])


def test_deepseek_v2_s_unsplit_kv_b_proj_is_split_per_head_as_llama_cpp_s_converter_splits_it(tmp_path):
    v2_lite_yarn = {**YARN, "type": "yarn", "mscale": 0.707, "mscale_all_dim": 0.707}
    reader, tensors, source = _export(tmp_path, "deepseek_v2", rope_scaling=v2_lite_yarn)
    assert not [name for name in tensors if "kv_b" in name]
    # Per head, the unrotated key rows then the value rows over the latent: keys transposed to (latent, unrotated).
    kv_b = source["model.layers.0.self_attn.kv_b_proj.weight"].reshape(HEADS, NOPE + VALUE, LATENT)
    k_b = np.asarray(tensors["blk.0.attn_k_b.weight"].data).reshape(HEADS, LATENT, NOPE)
    v_b = np.asarray(tensors["blk.0.attn_v_b.weight"].data).reshape(HEADS, VALUE, LATENT)
    np.testing.assert_array_equal(k_b, kv_b[:, :NOPE, :].swapaxes(1, 2))
    np.testing.assert_array_equal(v_b, kv_b[:, NOPE:, :])
    assert _key(reader, "deepseek2.expert_gating_func") == 1  # softmax
    assert _key(reader, "deepseek2.expert_weights_norm") is False  # mlx_lm's V2 never renormalises
    assert _key(reader, "deepseek2.rope.scaling.yarn_log_multiplier") == pytest.approx(0.0707)


def test_a_model_without_expert_groups_writes_no_group_keys(tmp_path):
    reader, _, _ = _export(tmp_path)
    assert "deepseek2.expert_group_count" not in reader.fields


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1}


def test_yarn_with_deepseek_s_mscale_all_dim_is_written_as_llama_cpp_divides_it(tmp_path):
    reader, _, _ = _export(tmp_path, rope_scaling={**YARN, "mscale": 1.0, "mscale_all_dim": 1.0})
    assert _key(reader, "deepseek2.rope.scaling.factor") == pytest.approx(4.0)
    assert _key(reader, "deepseek2.rope.scaling.original_context_length") == 64
    assert _key(reader, "deepseek2.rope.scaling.yarn_log_multiplier") == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"attention_bias": True}, "glm4_moe_lite with attention_bias=True"),
        ({"moe_layer_freq": 2}, "glm4_moe_lite with moe_layer_freq other than 1"),
        ({"n_shared_experts": 0}, "glm4_moe_lite without shared experts"),
        ({"n_group": 3, "topk_group": 1}, "glm4_moe_lite with 4 experts in 3 groups"),
        ({"norm_topk_prob": True, "num_experts_per_tok": 1}, "one expert per token"),
        ({"rope_scaling": YARN}, "glm4_moe_lite YaRN with mscale=1.0 and mscale_all_dim=None"),
        ({"rope_scaling": {**YARN, "mscale_all_dim": 0.5}}, "the two are equal"),
        ({"rope_scaling": {**YARN, "mscale_all_dim": 1.0, "extrapolation_factor": 0.5}}, "with extrapolation_factor"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "with rope_scaling of type 'linear'"),
        ({**deepseek_v2_config(), "topk_method": "group_limited_greedy"}, "topk_method 'group_limited_greedy'"),
        ({**deepseek_v2_config(), "rms_norm_eps": 1e-5}, "deepseek_v2 with rms_norm_eps 1e-05"),
    ],
)
def test_settings_llama_cpp_s_deepseek2_does_not_reproduce_are_refused_by_name(overrides, message):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    with pytest.raises(UnsupportedModel, match=message):
        family_for({**glm4_moe_lite_config(), **overrides})


def test_deepseek_v3_s_hard_coded_latent_norm_epsilon_is_refused_when_the_config_asks_another():
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    assert family_for(deepseek_v3_config()).architecture == "deepseek2"
    with pytest.raises(UnsupportedModel, match="deepseek_v3 with rms_norm_eps 1e-05"):
        family_for({**deepseek_v3_config(), "rms_norm_eps": 1e-5})


def test_keys_a_config_leaves_out_take_the_defaults_mlx_lm_ran_with(tmp_path):
    import gguf

    from unsloth.mlx.gguf.convert import write_hyperparameters

    left_out = ("norm_topk_prob", "routed_scaling_factor", "rope_theta", "rms_norm_eps", "first_k_dense_replace")
    config = {key: value for key, value in glm4_moe_lite_config().items() if key not in left_out}
    writer = gguf.GGUFWriter(str(tmp_path / "keys.gguf"), "deepseek2")
    write_hyperparameters(writer, config)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(tmp_path / "keys.gguf"))
    # glm4_moe_lite's ModelArgs: renormalised top-k scaled by 1.8, rope base 1e6, epsilon 1e-5, one dense layer.
    assert _key(reader, "deepseek2.expert_weights_norm") is True
    assert _key(reader, "deepseek2.expert_weights_scale") == pytest.approx(1.8)
    assert _key(reader, "deepseek2.rope.freq_base") == pytest.approx(1e6)
    assert _key(reader, "deepseek2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert _key(reader, "deepseek2.leading_dense_block_count") == 1
