"""Gemma 3n's GGUF file holds the tensors and keys llama.cpp's gemma3n loader asks for, and what it fixes is refused.

Expected names and shapes are read off llama.cpp's loader at the version llama-cpp-python 0.3.36 vendors
(`src/models/gemma3n.cpp`), in ggml's order (innermost first), for unequal sizes so a transposed tensor cannot pass.
Values are checked against the model folder's weights with the transforms written out here: AltUp's three
projections stacked, its coefficients clipped, per-layer embedding rows past their table copying row 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_gguf_gemma3n import build_gemma3n_model, gemma3n_config

EMBD, FF, HEAD, VOCAB, PER_LAYER_VOCAB, CLIP = 96, 160, 24, 512, 300, 0.3
_SMALL = {
    "hidden_size": EMBD,
    "intermediate_size": FF,
    "head_dim": HEAD,
    "vocab_size_per_layer_input": PER_LAYER_VOCAB,
    "altup_coef_clip": CLIP,
}


def _export(tmp_path: Path, **text) -> tuple:
    import gguf
    import mlx.core as mx

    from unsloth import FastLanguageModel

    folder = build_gemma3n_model(tmp_path / "model", **{**_SMALL, **text})
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    weights = mx.load(str(folder / "model.safetensors"))
    source = {name.replace("model.language_model.", "model.", 1): np.array(value) for name, value in weights.items()}
    return reader, tensors, source


def _shape(tensors, name) -> list:
    return [int(size) for size in tensors[name].shape]


def _data(tensors, name) -> np.ndarray:
    return np.asarray(tensors[name].data, dtype=np.float32)


def test_gemma3n_writes_altup_laurel_and_per_layer_inputs_as_llama_cpp_loads_them(tmp_path):
    reader, tensors, source = _export(tmp_path)
    assert reader.fields["general.architecture"].contents() == "gemma3n"
    layers, per_layer = 4, 256
    assert _shape(tensors, "token_embd.weight") == [EMBD, VOCAB]
    assert "output.weight" not in tensors  # llama.cpp ties the output to the token embedding, as mlx_lm does
    assert _shape(tensors, "altup_proj.weight") == [EMBD, EMBD, 3]
    assert _shape(tensors, "altup_unembd_proj.weight") == [EMBD, EMBD, 3]
    assert _shape(tensors, "per_layer_token_embd.weight") == [per_layer * layers, VOCAB]
    assert _shape(tensors, "per_layer_model_proj.weight") == [EMBD, per_layer * layers]
    assert _shape(tensors, "per_layer_proj_norm.weight") == [per_layer]
    expected = {
        "attn_q": [EMBD, 4 * HEAD],
        "attn_k": [EMBD, 2 * HEAD],
        "attn_output": [4 * HEAD, EMBD],
        "attn_q_norm": [HEAD],
        "ffn_gate": [EMBD, FF],
        "ffn_down": [FF, EMBD],
        "post_attention_norm": [EMBD],
        "post_ffw_norm": [EMBD],
        "inp_gate": [EMBD, per_layer],
        "proj": [per_layer, EMBD],
        "post_norm": [EMBD],
        "altup_correct_coef": [4, 4],
        "altup_correct_scale": [EMBD],
        "altup_predict_coef": [4, 16],
        "altup_router": [EMBD, 4],
        "altup_router_norm": [EMBD],
        "laurel_l": [EMBD, 64],
        "laurel_r": [64, EMBD],
        "laurel_post_norm": [EMBD],
    }
    for layer in range(layers):
        for tensor, shape in expected.items():
            assert _shape(tensors, f"blk.{layer}.{tensor}.weight") == shape, (layer, tensor)
    stacked = np.stack([source[f"model.altup_projections.{index}.weight"] for index in range(3)])
    np.testing.assert_array_equal(_data(tensors, "altup_proj.weight"), stacked)
    coefficients = source["model.layers.1.altup.prediction_coefs.weight"]
    assert np.abs(coefficients).max() > CLIP  # the clip bites, so writing the raw coefficients would fail below
    np.testing.assert_array_equal(_data(tensors, "blk.1.altup_predict_coef.weight"), np.clip(coefficients, -CLIP, CLIP))
    rows = _data(tensors, "per_layer_token_embd.weight")
    np.testing.assert_array_equal(rows[:PER_LAYER_VOCAB], source["model.embed_tokens_per_layer.weight"])
    np.testing.assert_array_equal(rows[PER_LAYER_VOCAB:], np.repeat(rows[:1], VOCAB - PER_LAYER_VOCAB, axis=0))
    np.testing.assert_array_equal(
        _data(tensors, "blk.2.altup_correct_scale.weight"), source["model.layers.2.altup.correct_output_scale"]
    )
    keys = {name: reader.fields[f"gemma3n.{name}"].contents() for name in _KEYS}
    assert keys == _KEYS


_KEYS = {
    "embedding_length": EMBD,
    "feed_forward_length": FF,
    "attention.key_length": HEAD,
    "attention.head_count_kv": 2,
    "attention.sliding_window": 8,
    "attention.sliding_window_pattern": [True, False, True, False],
    "rope.freq_base": 1000000.0,
    "rope.freq_base_swa": 10000.0,
    "altup.active_idx": 0,
    "altup.num_inputs": 4,
    "embedding_length_per_layer_input": 256,
    "attention.shared_kv_layers": 0,
}


def test_an_unapplied_altup_output_scale_is_written_as_ones(tmp_path):
    _, tensors, source = _export(tmp_path, altup_correct_scale=False)
    assert not np.all(source["model.layers.0.altup.correct_output_scale"] == 1.0)
    np.testing.assert_array_equal(_data(tensors, "blk.0.altup_correct_scale.weight"), np.ones(EMBD, np.float32))


def _e2b_text(**changes) -> dict:
    """The E2B's text settings that decide what llama.cpp fixes: 30 layers, the last 10 reusing keys and values."""
    layers = 30
    return {
        **gemma3n_config()["text_config"],
        "num_hidden_layers": layers,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * (layers // 5),
        "num_kv_shared_layers": 10,
        "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 20,
        **changes,
    }


def _check(text: dict) -> None:
    from unsloth.mlx.gguf.convert import family_for
    from unsloth.mlx.gguf.families import unwrap_text_model

    family_for(unwrap_text_model({**gemma3n_config(), "text_config": text})[0])


def test_the_published_e2b_layout_is_exported():
    _check(_e2b_text())


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"altup_num_inputs": 2}, "altup_num_inputs=2"),
        ({"altup_active_idx": 1}, "altup_active_idx=1"),
        ({"laurel_rank": 32}, "laurel_rank=32"),
        ({"hidden_size_per_layer_input": 128}, "hidden_size_per_layer_input=128"),
        ({"final_logit_softcapping": None}, "final_logit_softcapping=None"),
        ({"activation_sparsity_pattern": [0.95] * 8 + [0.0] * 22}, "activation_sparsity_pattern"),
        ({"num_kv_shared_layers": 15}, "num_kv_shared_layers=15"),
        ({"num_kv_shared_layers": 0}, "num_kv_shared_layers=0"),
        ({"layer_types": ["full_attention"] + ["sliding_attention"] * 29}, "num_kv_shared_layers=10"),
    ],
)
def test_a_setting_llama_cpp_holds_fixed_is_refused_by_name(changes, named):
    from unsloth.mlx.gguf.convert import UnsupportedModel

    with pytest.raises(UnsupportedModel, match=named.replace("[", r"\[")):
        _check(_e2b_text(**changes))
