"""The hybrid and mixture-of-experts families' GGUF files hold the tensors and keys llama.cpp's loader asks for.

Each expected name and shape below is read off llama.cpp's loader at the version llama-cpp-python 0.3.36 vendors
(`src/models/lfm2.cpp`, `granite-hybrid.cpp`, `openai-moe.cpp`, `qwen3moe.cpp`), in ggml's order (innermost
first), for the sizes of the tiny config; sizes are chosen unequal so a transposed tensor cannot pass. Values are
checked against the model folder's own weights, with the transform written out here (A = -exp(A_log), the gate
rows before the up rows, llama's interleaved rotary rows).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model, gpt_oss_config, granitemoehybrid_config, lfm2_config
from tools.kits.tiny_gguf_families import (
    GENERIC_FAMILIES,
    gemma4_text_config,
    ernie4_5_config,
    ernie4_5_moe_config,
    granite_config,
    lfm2_moe_config,
    qwen3_moe_config,
)

# Shared by every config here: width 64, 4 heads, 2 KV heads, a 512-token vocabulary.
EMBD, VOCAB = 64, 512

LFM2 = {**lfm2_config(), "block_ff_dim": 200, "block_auto_adjust_ff_dim": True, "block_multiple_of": 32}
GRANITE_H = {**granitemoehybrid_config(moe=True), "intermediate_size": 96, "shared_intermediate_size": 160}
GRANITE_H_DENSE = {**granitemoehybrid_config(moe=False), "intermediate_size": 96, "position_embedding_type": "nope"}
GPT_OSS = {**gpt_oss_config(), "head_dim": 24, "intermediate_size": 96}
GRANITE = {**granite_config(), "hidden_size": EMBD, "intermediate_size": 96}
QWEN3_MOE = {**qwen3_moe_config(), "hidden_size": EMBD, "head_dim": 24, "moe_intermediate_size": 96}


def _export(tmp_path: Path, config: dict) -> tuple:
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_tiny_hybrid_model(tmp_path / "model", config["model_type"], config=config)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    source = {name: np.array(value) for name, value in mx.load(str(folder / "model.safetensors")).items()}
    return reader, tensors, source


def _key(reader, key):
    field = reader.fields[key]
    value = field.contents()
    return value


def _shapes(tensors) -> dict:
    return {name: [int(size) for size in tensor.shape] for name, tensor in tensors.items()}


def _data(tensors, name) -> np.ndarray:
    return np.asarray(tensors[name].data, dtype=np.float32)


def test_lfm2_has_short_convolutions_and_attention_only_where_its_layer_types_say(tmp_path):
    reader, tensors, source = _export(tmp_path, LFM2)
    shapes = _shapes(tensors)
    ff = 160  # int(2 * 200 / 3) = 133, times 1.0, rounded up to a multiple of 32
    assert _key(reader, "general.architecture") == "lfm2"
    assert _key(reader, "lfm2.shortconv.l_cache") == 3
    assert list(_key(reader, "lfm2.attention.head_count_kv")) == [0, 2, 0, 2]  # 0 marks a convolution layer
    assert _key(reader, "lfm2.feed_forward_length") == ff
    assert _key(reader, "lfm2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert shapes["token_embd_norm.weight"] == [EMBD]  # LFM2's final norm, under llama.cpp's name for it
    assert "output.weight" not in shapes  # tied embeddings
    for layer in (0, 2):
        assert shapes[f"blk.{layer}.shortconv.conv.weight"] == [3, EMBD]
        assert shapes[f"blk.{layer}.shortconv.in_proj.weight"] == [EMBD, 3 * EMBD]
        assert shapes[f"blk.{layer}.shortconv.out_proj.weight"] == [EMBD, EMBD]
        assert f"blk.{layer}.attn_q.weight" not in shapes
    for layer in (1, 3):
        assert shapes[f"blk.{layer}.attn_q_norm.weight"] == [16]
        assert shapes[f"blk.{layer}.attn_k.weight"] == [EMBD, 32]
        assert shapes[f"blk.{layer}.attn_output.weight"] == [EMBD, EMBD]
    assert shapes["blk.0.ffn_gate.weight"] == [EMBD, ff] and shapes["blk.0.ffn_down.weight"] == [ff, EMBD]
    # The convolution kernel keeps its channel-major layout, its trailing axis of 1 dropped.
    conv = source["model.layers.0.conv.conv.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.0.shortconv.conv.weight"), conv.reshape(EMBD, 3))
    assert tensors["blk.0.shortconv.conv.weight"].tensor_type.name == "F32"


def test_granite_hybrid_moe_has_mamba2_keys_and_split_shared_experts(tmp_path):
    reader, tensors, source = _export(tmp_path, GRANITE_H)
    shapes = _shapes(tensors)
    inner, state, heads, conv = 128, 16, 8, 4  # mamba_n_heads * mamba_d_head, d_state, n_heads, d_conv
    assert _key(reader, "general.architecture") == "granitehybrid"
    expected_keys = {
        "granitehybrid.ssm.conv_kernel": conv,
        "granitehybrid.ssm.state_size": state,
        "granitehybrid.ssm.group_count": 1,
        "granitehybrid.ssm.inner_size": inner,
        "granitehybrid.ssm.time_step_rank": heads,
        "granitehybrid.expert_count": 4,
        "granitehybrid.expert_used_count": 2,
        "granitehybrid.feed_forward_length": 96,
        "granitehybrid.expert_shared_feed_forward_length": 160,
        "granitehybrid.rope.scaling.finetuned": True,
    }
    assert {key: _key(reader, key) for key in expected_keys} == expected_keys
    scales = ("embedding_scale", "attention.scale", "residual_scale", "logit_scale")
    assert [_key(reader, f"granitehybrid.{key}") for key in scales] == pytest.approx([12.0, 0.125, 0.25, 4.0])
    assert list(_key(reader, "granitehybrid.attention.head_count_kv")) == [0, 2, 0]
    in_proj = 2 * inner + 2 * state + heads
    assert shapes["blk.0.ssm_in.weight"] == [EMBD, in_proj]
    assert shapes["blk.0.ssm_conv1d.weight"] == [conv, inner + 2 * state]
    assert shapes["blk.0.ssm_conv1d.bias"] == [inner + 2 * state]
    assert shapes["blk.0.ssm_dt.bias"] == [heads]
    assert shapes["blk.0.ssm_a"] == [1, heads] and shapes["blk.0.ssm_d"] == [1, heads]
    assert shapes["blk.0.ssm_norm.weight"] == [inner, 1]
    assert shapes["blk.0.ssm_out.weight"] == [inner, EMBD]
    assert shapes["blk.1.ffn_gate_inp.weight"] == [EMBD, 4]
    assert shapes["blk.1.ffn_gate_exps.weight"] == [EMBD, 96, 4]
    assert shapes["blk.1.ffn_down_exps.weight"] == [96, EMBD, 4]
    assert shapes["blk.1.ffn_gate_shexp.weight"] == [EMBD, 160]
    assert shapes["blk.1.ffn_down_shexp.weight"] == [160, EMBD]
    assert "blk.0.attn_q.weight" not in shapes and shapes["blk.1.attn_k.weight"] == [EMBD, 32]
    a_log = source["model.layers.0.mamba.A_log"]
    np.testing.assert_allclose(_data(tensors, "blk.0.ssm_a").ravel(), -np.exp(a_log), rtol=1e-6)
    shared = source["model.layers.1.shared_mlp.input_linear.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.1.ffn_gate_shexp.weight"), shared[:160])
    np.testing.assert_array_equal(_data(tensors, "blk.1.ffn_up_shexp.weight"), shared[160:])
    # Attention rows interleaved per head, as llama.cpp's llama-style rotary pairs them: row 2i+1 is row i + 8.
    query, stored = source["model.layers.1.self_attn.q_proj.weight"], _data(tensors, "blk.1.attn_q.weight")
    np.testing.assert_array_equal(stored[[0, 1, 2, 3]], query[[0, 8, 1, 9]])
    for name in ("blk.0.ssm_conv1d.weight", "blk.0.ssm_norm.weight", "blk.1.ffn_gate_inp.weight"):
        assert tensors[name].tensor_type.name == "F32"


def test_granite_hybrid_dense_has_a_plain_mlp_and_no_rope_when_its_config_says_nope(tmp_path):
    reader, tensors, _ = _export(tmp_path, GRANITE_H_DENSE)
    shapes = _shapes(tensors)
    assert "granitehybrid.expert_count" not in reader.fields
    assert _key(reader, "granitehybrid.rope.scaling.finetuned") is False  # Granite's switch for rotary embeddings
    assert shapes["blk.0.ffn_gate.weight"] == [EMBD, 96] and shapes["blk.0.ffn_down.weight"] == [96, EMBD]
    assert not [name for name in shapes if "exps" in name or "shexp" in name]


@pytest.mark.parametrize(("moe", "architecture"), [(True, "granitemoe"), (False, "granite")])
def test_granite_4_without_mamba_layers_is_written_as_granite_3_or_granite_moe(tmp_path, moe, architecture):
    base = GRANITE_H if moe else GRANITE_H_DENSE
    reader, tensors, _ = _export(tmp_path, {**base, "layer_types": ["attention"] * 3})
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == architecture  # as llama.cpp's converter writes such models
    assert _key(reader, f"{architecture}.logit_scale") == 4.0
    if not moe:  # granite's graph reads the rotary switch; the dense config here says `nope`
        assert _key(reader, "granite.rope.scaling.finetuned") is False
    assert not [name for name in shapes if "ssm" in name]
    if moe:
        assert _key(reader, "granitemoe.expert_shared_feed_forward_length") == 160
        assert shapes["blk.2.ffn_up_shexp.weight"] == [EMBD, 160] and shapes["blk.2.ffn_up_exps.weight"] == [
            EMBD,
            96,
            4,
        ]
    else:
        assert shapes["blk.2.ffn_up.weight"] == [EMBD, 96]


def test_gpt_oss_has_sinks_biased_experts_and_alternating_sliding_windows(tmp_path):
    reader, tensors, source = _export(tmp_path, GPT_OSS)
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "gpt-oss"
    assert _key(reader, "gpt-oss.expert_feed_forward_length") == 96
    assert _key(reader, "gpt-oss.attention.sliding_window") == 32
    assert list(_key(reader, "gpt-oss.attention.sliding_window_pattern")) == [True, False]
    assert _key(reader, "gpt-oss.attention.key_length") == 24
    assert (_key(reader, "gpt-oss.expert_count"), _key(reader, "gpt-oss.expert_used_count")) == (4, 2)
    expected = {
        "blk.0.attn_q.weight": [EMBD, 96],
        "blk.0.attn_q.bias": [96],
        "blk.0.attn_k.weight": [EMBD, 48],
        "blk.0.attn_output.weight": [96, EMBD],
        "blk.0.attn_output.bias": [EMBD],
        "blk.0.attn_sinks.weight": [4],
        "blk.0.post_attention_norm.weight": [EMBD],
        "blk.0.ffn_gate_inp.weight": [EMBD, 4],
        "blk.0.ffn_gate_inp.bias": [4],
        "blk.0.ffn_gate_exps.weight": [EMBD, 96, 4],
        "blk.0.ffn_gate_exps.bias": [96, 4],
        "blk.0.ffn_up_exps.bias": [96, 4],
        "blk.0.ffn_down_exps.weight": [96, EMBD, 4],
        "blk.0.ffn_down_exps.bias": [EMBD, 4],
        "output.weight": [EMBD, VOCAB],
    }
    assert {name: shapes.get(name) for name in expected} == expected
    np.testing.assert_array_equal(_data(tensors, "blk.1.attn_sinks.weight"), source["model.layers.1.self_attn.sinks"])
    # No rotary reordering: gpt-oss's graph rotates halves, as the Hugging Face rows are laid out.
    query = source["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(_data(tensors, "blk.0.attn_q.weight"), query)


def test_gpt_oss_yarn_is_written_as_llama_cpp_reads_it(tmp_path):
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 64, "beta_fast": 16.0}
    reader, _, _ = _export(tmp_path, {**GPT_OSS, "rope_scaling": yarn})
    assert _key(reader, "gpt-oss.rope.scaling.type") == "yarn"
    assert _key(reader, "gpt-oss.rope.scaling.factor") == 32.0
    assert _key(reader, "gpt-oss.rope.scaling.original_context_length") == 64
    assert _key(reader, "gpt-oss.rope.scaling.yarn_beta_fast") == 16.0
    assert _key(reader, "gpt-oss.rope.scaling.yarn_beta_slow") == 1.0  # YaRN's default, which mlx_lm uses too


def test_granite_and_qwen3_moe_carry_their_multipliers_and_expert_widths(tmp_path):
    reader, _, _ = _export(tmp_path / "granite", GRANITE)
    scales = ("embedding_scale", "attention.scale", "residual_scale", "logit_scale")
    assert [_key(reader, f"granite.{key}") for key in scales] == pytest.approx([0.5, 0.1, 0.8, 0.5])
    reader, tensors, _ = _export(tmp_path / "qwen3_moe", QWEN3_MOE)
    shapes = _shapes(tensors)
    assert _key(reader, "qwen3moe.expert_feed_forward_length") == 96
    assert shapes["blk.0.ffn_gate_exps.weight"] == [EMBD, 96, 4]
    assert shapes["blk.0.ffn_down_exps.weight"] == [96, EMBD, 4]
    assert shapes["blk.0.ffn_gate_inp.weight"] == [EMBD, 4]
    assert shapes["blk.0.attn_q_norm.weight"] == [24]


def test_olmo2_norms_after_each_block_and_over_all_query_heads(tmp_path):
    from tools.kits.tiny_gguf_families import olmo2_config

    reader, tensors, _ = _export(tmp_path, {**olmo2_config(), "hidden_size": EMBD, "intermediate_size": 96})
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "olmo2"
    expected = {
        "blk.0.attn_q_norm.weight": [EMBD],  # n_embd: one norm over every query head
        "blk.0.attn_k_norm.weight": [32],  # n_head_kv * head size
        "blk.0.post_attention_norm.weight": [EMBD],
        "blk.0.post_ffw_norm.weight": [EMBD],
        "blk.0.ffn_down.weight": [96, EMBD],
        "output.weight": [EMBD, VOCAB],
    }
    assert {name: shapes.get(name) for name in expected} == expected
    assert "blk.0.attn_norm.weight" not in shapes and "blk.0.ffn_norm.weight" not in shapes


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({**QWEN3_MOE, "norm_topk_prob": False}, "qwen3_moe with norm_topk_prob=False"),
        ({**QWEN3_MOE, "mlp_only_layers": [1]}, "qwen3_moe with dense layers"),
        (
            {**GRANITE_H, "layer_types": ["attention"] * 3, "position_embedding_type": "nope"},
            "granitemoe always applies rotary embeddings",
        ),
        ({**ernie4_5_moe_config(), "moe_gate_act": "sigmoid"}, "llama.cpp's routes by softmax"),
        ({**ernie4_5_moe_config(), "moe_layer_end_index": 1}, "ernie4_5_moe with dense trailing layers"),
        ({**ernie4_5_config(), "use_bias": True}, "ernie4_5 with use_bias=True"),
        ({**lfm2_moe_config(), "norm_topk_prob": False}, "lfm2_moe with norm_topk_prob=False"),
        ({**GENERIC_FAMILIES["olmoe"](), "num_key_value_heads": 2}, "llama.cpp's OLMoE has no GQA"),
        ({**GENERIC_FAMILIES["qwen2_moe"](), "norm_topk_prob": True}, "qwen2_moe with norm_topk_prob=True"),
        (
            {**GENERIC_FAMILIES["smollm3"](), "no_rope_layer_interval": 2},
            "smollm3 with rotary embeddings off in layers",
        ),
        ({**lfm2_moe_config(), "routed_scaling_factor": 2.5}, "lfm2_moe with routed_scaling_factor other than 1"),
        ({**GENERIC_FAMILIES["glm4_moe"](), "scoring_func": "softmax"}, "glm4moe routes by sigmoid"),
        ({**gemma4_text_config(), "attention_k_eq_v": True}, "gemma4_text with attention_k_eq_v=True"),
        ({**gemma4_text_config(), "vocab_size_per_layer_input": 256}, "have one row per token"),
        ({**GENERIC_FAMILIES["glm4_moe"](), "n_group": 2, "topk_group": 1}, "glm4moe reads no groups"),
    ],
)
def test_settings_llama_cpp_does_not_reproduce_are_refused_by_name_before_writing(tmp_path, config, message):
    from unsloth import FastLanguageModel

    folder = build_tiny_hybrid_model(tmp_path / "model", config["model_type"], config=QWEN3_MOE)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(config))  # what export reads
    with pytest.raises(NotImplementedError, match=message):
        model.save_pretrained_gguf(str(tmp_path / "out"), tokenizer)
    assert not (tmp_path / "out").exists()


def test_glm4_moe_experts_selection_bias_and_routing_keys_as_llama_cpp_loads_them(tmp_path):
    reader, tensors, _ = _export(tmp_path, GENERIC_FAMILIES["glm4_moe"]())
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "glm4moe"
    expected = {
        "blk.0.ffn_gate.weight": [256, 256],  # first_k_dense_replace=1: layer 0 is dense
        "blk.1.ffn_gate_inp.weight": [256, 4],
        "blk.1.exp_probs_b.bias": [4],
        "blk.1.ffn_gate_exps.weight": [256, 256, 4],
        "blk.1.ffn_up_shexp.weight": [256, 256],
        "blk.1.post_attention_norm.weight": [256],
        "blk.1.attn_q_norm.weight": [64],
    }
    assert {name: shapes.get(name) for name in expected} == expected
    keys = (
        "expert_count",
        "expert_used_count",
        "leading_dense_block_count",
        "expert_shared_count",
        "rope.dimension_count",
    )
    assert [_key(reader, f"glm4moe.{key}") for key in keys] == [4, 2, 1, 1, 32]
    assert _key(reader, "glm4moe.expert_weights_scale") == pytest.approx(1.5)
    assert _key(reader, "glm4moe.expert_weights_norm") is True
    assert _key(reader, "glm4moe.expert_gating_func") == 2  # sigmoid


@pytest.mark.parametrize("builder", ["gemma4_text_config", "gemma4_config"])
def test_gemma4_text_keys_per_layer_shapes_and_proportional_rope_as_llama_cpp_loads_them(tmp_path, builder):
    import tools.kits.tiny_gguf_families as kit

    reader, tensors, _ = _export(tmp_path, getattr(kit, builder)())
    shapes = _shapes(tensors)
    assert _key(reader, "general.architecture") == "gemma4"
    expected = {
        "blk.0.attn_q.weight": [256, 4 * 64],  # sliding layer: 64-wide heads
        "blk.1.attn_q.weight": [256, 4 * 128],  # full layer: global_head_dim
        "blk.1.attn_k.weight": [256, 2 * 128],
        "blk.1.attn_q_norm.weight": [128],
        "blk.2.ffn_gate.weight": [256, 2 * 256],  # a layer reusing keys and values: double-wide MLP
        "blk.0.layer_output_scale.weight": [1],
        "per_layer_token_embd.weight": [4 * 64, 512],
        "per_layer_model_proj.weight": [256, 4 * 64],
        "per_layer_proj_norm.weight": [64],
        "blk.0.inp_gate.weight": [256, 64],
        "blk.0.proj.weight": [64, 256],
        "rope_freqs.weight": [64],
    }
    assert {name: shapes.get(name) for name in expected} == expected
    assert "blk.2.attn_k.weight" not in shapes and "output.weight" not in shapes  # shared keys, tied output
    scalars = ("attention.key_length", "attention.key_length_swa", "rope.dimension_count", "rope.dimension_count_swa")
    assert [_key(reader, f"gemma4.{key}") for key in scalars] == [128, 64, 128, 64]
    assert _key(reader, "gemma4.attention.shared_kv_layers") == 2
    assert _key(reader, "gemma4.feed_forward_length") == [256, 256, 512, 512]
    assert _key(reader, "gemma4.attention.sliding_window_pattern") == [True, False, True, False]
    assert _key(reader, "gemma4.rope.freq_base_swa") == 10000.0
    freqs = _data(tensors, "rope_freqs.weight")  # a quarter of 128 rotates: 16 pairs, the other 48 do not
    assert (freqs[:16] == 1.0).all() and (freqs[16:] > 1e29).all()


def test_gpt_oss_o200k_splitting_gets_llama_cpp_s_gpt_4o_pre_tokenizer(tmp_path):
    import gguf

    from tools.kits.tiny_gguf_families import build_gguf_family_model
    from unsloth import FastLanguageModel

    folder = build_gguf_family_model(tmp_path / "model", "gpt_oss")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f16")
    assert gguf.GGUFReader(str(path)).fields["tokenizer.ggml.pre"].contents() == "gpt-4o"


def test_ministral_3_carries_yarn_its_log_multiplier_and_llama_4_attention_temperature(tmp_path):
    from tools.kits.tiny_gguf_families import ministral3_config

    config = ministral3_config()
    config["rope_parameters"] = {**config["rope_parameters"], "mscale_all_dim": 0.5, "llama_4_scaling_beta": 0.25}
    config = {**config, "hidden_size": EMBD, "head_dim": 24, "intermediate_size": 96}
    reader, tensors, source = _export(tmp_path, config)
    assert _key(reader, "general.architecture") == "mistral3"
    assert _key(reader, "mistral3.rope.scaling.type") == "yarn"
    assert _key(reader, "mistral3.rope.scaling.original_context_length") == 16
    assert _key(reader, "mistral3.rope.scaling.yarn_log_multiplier") == 0.5
    assert _key(reader, "mistral3.attention.temperature_scale") == 0.25
    query = source["model.layers.0.self_attn.q_proj.weight"]
    assert not np.array_equal(_data(tensors, "blk.0.attn_q.weight"), query)  # rows interleaved, as llama's


def test_the_mistral_3_wrapper_is_exported_as_its_language_model(tmp_path):
    from tools.kits.tiny_gguf_families import mistral3_config

    config = mistral3_config()
    config["text_config"] = {**config["text_config"], "hidden_size": EMBD, "head_dim": 24, "intermediate_size": 96}
    reader, tensors, source = _export(tmp_path, config)
    assert _key(reader, "general.architecture") == "mistral3"
    assert _shapes(tensors)["blk.0.attn_q.weight"] == [EMBD, 4 * 24]
    assert "language_model.lm_head.weight" in source
    np.testing.assert_array_equal(_data(tensors, "output.weight"), source["language_model.lm_head.weight"])


@pytest.mark.parametrize("use_bias", [True, False])
def test_lfm2_moe_has_sigmoid_routing_a_selection_bias_and_a_dense_first_block(tmp_path, use_bias):
    config = {**lfm2_moe_config(), "hidden_size": EMBD, "moe_intermediate_size": 96, "intermediate_size": 160}
    reader, tensors, source = _export(tmp_path, {**config, "use_expert_bias": use_bias})
    assert _key(reader, "general.architecture") == "lfm2moe"
    assert _key(reader, "lfm2moe.expert_gating_func") == 2  # sigmoid
    assert _key(reader, "lfm2moe.leading_dense_block_count") == 1
    assert _key(reader, "lfm2moe.expert_count") == 4 and _key(reader, "lfm2moe.expert_used_count") == 2
    assert _key(reader, "lfm2moe.expert_feed_forward_length") == 96
    shapes = _shapes(tensors)
    assert shapes["blk.0.ffn_gate.weight"] == [EMBD, 160] and "blk.0.ffn_gate_inp.weight" not in shapes
    assert shapes["blk.1.ffn_gate_exps.weight"] == [EMBD, 96, 4]
    bias = source.get("model.layers.1.feed_forward.expert_bias", np.zeros(4, dtype=np.float32))
    np.testing.assert_array_equal(_data(tensors, "blk.1.exp_probs_b.bias"), bias)
