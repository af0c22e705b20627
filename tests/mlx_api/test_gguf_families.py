"""The GGUF converter, checked without llama.cpp: names, layouts, hyperparameters and tokenizer keys per family.

Each tiny model is mlx_lm's own class for that family, built with its family's kind of tokenizer; the file is
read back with the `gguf` package's reader. llama.cpp itself runs these files in tests/mlx_api/with_llama_cpp.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_mlx_model import FAMILY_CONFIGS, build_tiny_mlx_model

# model_type: (llama.cpp architecture, tokenizer.ggml.model, tokenizer.ggml.pre or None)
WRITTEN_AS = {
    "llama": ("llama", "gpt2", "llama-bpe"),
    "mistral": ("llama", "llama", None),
    "qwen2": ("qwen2", "gpt2", "qwen2"),
    "qwen3": ("qwen3", "gpt2", "qwen2"),
    "gemma2": ("gemma2", "llama", None),
    "gemma3_text": ("gemma3", "llama", None),
    "phi3": ("phi3", "llama", None),
}
TEMPLATE = "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|eos|>\n{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("family-tokenizers")


@pytest.fixture(scope="module", params=FAMILY_CONFIGS)
def exported(request, tokenizer_cache, tmp_path_factory):
    """A family's tiny model (untrained), its weights, and its f32 GGUF read back."""
    import gguf
    from mlx.utils import tree_flatten

    from unsloth import FastLanguageModel

    root = tmp_path_factory.mktemp(request.param)
    folder = build_tiny_mlx_model(root / "model", architecture=request.param, tokenizer_cache_dir=tokenizer_cache)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    tokenizer.chat_template = TEMPLATE
    path = model.save_pretrained_gguf(str(root / "gguf"), tokenizer, quantization_method="f32")
    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: np.array(tensor.data) for tensor in reader.tensors}
    config = json.loads((folder / "config.json").read_text())
    weights = {name: np.array(value) for name, value in tree_flatten(model.parameters())}
    return {
        "family": request.param,
        "reader": reader,
        "tensors": tensors,
        "weights": weights,
        "config": config,
        "tokenizer": tokenizer,
    }


def _field(reader, key):
    return reader.fields[key].contents()


def test_each_family_is_written_as_its_llama_cpp_architecture_and_tokenizer(exported):
    reader, family = exported["reader"], exported["family"]
    architecture, vocabulary, pre = WRITTEN_AS[family]
    assert _field(reader, "general.architecture") == architecture
    assert _field(reader, "tokenizer.ggml.model") == vocabulary
    assert (_field(reader, "tokenizer.ggml.pre") if "tokenizer.ggml.pre" in reader.fields else None) == pre
    assert _field(reader, f"{architecture}.block_count") == 2
    assert _field(reader, f"{architecture}.attention.head_count_kv") == 2
    head_dim = exported["config"].get("head_dim") or 64 // 4
    assert _field(reader, f"{architecture}.attention.key_length") == head_dim
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert tokens[_field(reader, "tokenizer.ggml.eos_token_id")] == "<|eos|>"
    assert tokens[_field(reader, "tokenizer.ggml.padding_token_id")] == "<|pad|>"
    assert _field(reader, "tokenizer.chat_template") == TEMPLATE
    if vocabulary == "llama":  # SentencePiece-style: the 256 byte tokens are typed as bytes for byte fallback
        types = _field(reader, "tokenizer.ggml.token_type")
        assert sum(kind == 6 for kind in types) == 256 and types[tokens.index("<0x41>")] == 6


def test_every_weight_has_its_tensor_and_nothing_is_dropped(exported):
    weights, tensors, family = exported["weights"], exported["tensors"], exported["family"]
    expected = len(weights) - (family == "gemma2" and "lm_head.weight" in weights)
    extra = {"rope_freqs.weight"} if family == "llama" else set()
    assert len(tensors) == expected + len(extra)
    norms = [name for name in weights if name.endswith("norm.weight")]
    assert len([name for name in tensors if "norm" in name]) == len(norms) >= 5  # every norm, q/k norms included


def test_layouts_llama_cpp_expects(exported):
    from unsloth.mlx.gguf.convert import interleave_rotary_rows

    weights, tensors, family = exported["weights"], exported["tensors"], exported["family"]
    v = weights["model.layers.1.self_attn.v_proj.weight"] if family != "phi3" else None
    if v is not None:
        assert np.array_equal(tensors["blk.1.attn_v.weight"].reshape(v.shape), v)
    q = weights.get("model.layers.0.self_attn.q_proj.weight")
    if family in ("llama", "mistral"):  # llama's graph takes each head's rotary pairs interleaved
        assert np.array_equal(tensors["blk.0.attn_q.weight"].reshape(q.shape), interleave_rotary_rows(q, 4))
        assert not np.array_equal(tensors["blk.0.attn_q.weight"].reshape(q.shape), q)
    elif q is not None:
        assert np.array_equal(tensors["blk.0.attn_q.weight"].reshape(q.shape), q)
    plain = {"attn_output": "self_attn.o_proj", "ffn_down": "mlp.down_proj", "ffn_gate": "mlp.gate_proj"}
    for gguf_part, hf_part in plain.items():  # the matrices written as they are, each under its own name
        if f"model.layers.1.{hf_part}.weight" in weights:
            value = weights[f"model.layers.1.{hf_part}.weight"]
            assert np.array_equal(tensors[f"blk.1.{gguf_part}.weight"].reshape(value.shape), value), gguf_part
    norm = weights["model.layers.0.input_layernorm.weight"]
    offset = 1.0 if family.startswith("gemma") else 0.0  # Gemma scales by 1 + weight
    assert np.array_equal(tensors["blk.0.attn_norm.weight"], norm + np.float32(offset))
    if family == "qwen2":
        bias = weights["model.layers.0.self_attn.k_proj.bias"]
        assert np.array_equal(tensors["blk.0.attn_k.bias"], bias)
    if family == "phi3":
        fused = weights["model.layers.0.mlp.gate_up_proj.weight"]
        assert np.array_equal(tensors["blk.0.ffn_up.weight"].reshape(fused.shape), fused)


def test_family_hyperparameters(exported):
    reader, family, config = exported["reader"], exported["family"], exported["config"]
    if family == "llama":  # Llama 3.1's rope scaling becomes per-frequency divisors
        factors = exported["tensors"]["rope_freqs.weight"]
        assert factors.shape == (8,) and factors[0] == 1.0 and factors[-1] == 8.0
    if family == "gemma2":
        assert _field(reader, "gemma2.attn_logit_softcapping") == 50.0
        assert _field(reader, "gemma2.final_logit_softcapping") == 30.0
    if family == "gemma3_text":
        assert list(_field(reader, "gemma3.attention.sliding_window_pattern")) == [True, False]
        assert _field(reader, "gemma3.rope.freq_base_swa") == config["rope_local_base_freq"]
        assert _field(reader, "gemma3.rope.freq_base") == config["rope_theta"]


# The types exported when each family became a registered converter: none may drop out of the refusal's list.
_EXPORTED_BEFORE_THE_REGISTRY = (
    "llama mistral qwen2 qwen3 gemma2 gemma3_text phi3 granite qwen3_moe olmo2 lfm2 granitemoehybrid gpt_oss ernie4_5 "
    "ernie4_5_moe lfm2_moe gemma mixtral seed_oss olmoe qwen2_moe internlm3 hunyuan_v1_dense smollm3 starcoder2 phi "
    "cohere glm4 stablelm ministral3 glm4_moe gemma4_text gemma3n_text falcon_h1 nemotron_h qwen3_5_text "
    "qwen3_5_moe_text glm4_moe_lite deepseek_v3 deepseek_v2"
).split()


def test_an_architecture_outside_the_list_is_refused_by_name(tiny_model_dir, tmp_path):
    import shutil

    from unsloth import FastLanguageModel

    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "model_type": "phimoe", "architectures": ["PhiMoEForCausalLM"]})
    )  # what export reads
    with pytest.raises(
        NotImplementedError,
        match=r"cannot write model_type 'phimoe': llama.cpp's phimoe routes by a renormalized softmax top-k, "
        r"mlx_lm's by PhiMoE's sparsemixer.*exported: ",
    ) as refused:
        model.save_pretrained_gguf(str(tmp_path / "out"), tokenizer)
    listed = str(refused.value).rsplit("exported: ", 1)[1].rstrip(")").split(", ")
    assert listed == sorted(listed)
    assert set(_EXPORTED_BEFORE_THE_REGISTRY) <= set(listed)
    assert not (tmp_path / "out").exists()


def test_an_unknown_byte_level_pre_tokenizer_is_refused_not_guessed():
    from unsloth.mlx.gguf.tokenizer import UnsupportedTokenizer, byte_level_pre_name

    split = {"type": "Split", "pattern": {"Regex": r"\p{L}+|\d"}, "behavior": "Isolated", "invert": False}
    pre = {"type": "Sequence", "pretokenizers": [split, {"type": "ByteLevel", "use_regex": False}]}
    with pytest.raises(UnsupportedTokenizer, match="not one llama.cpp is known to apply"):
        byte_level_pre_name(pre)


@pytest.mark.parametrize(
    ("post_processor", "adds_bos"),
    [
        ({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]}, True),
        (
            {
                "type": "Sequence",
                "processors": [
                    {"type": "ByteLevel"},
                    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {}}]},
                ],
            },
            True,
        ),
        ({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}]}, False),
        ({"type": "TemplateProcessing", "single": []}, False),
        ({"type": "ByteLevel"}, False),
        (None, False),
    ],
)
def test_whether_bos_is_added_is_read_from_the_post_processor(post_processor, adds_bos):
    from unsloth.mlx.gguf.tokenizer import special_token_keys

    spec = {"post_processor": post_processor}
    keys = special_token_keys(spec, {"bos_token": {"content": "<s>"}, "eos_token": "</s>"}, ["<s>", "</s>", "a"])
    assert keys["tokenizer.ggml.add_bos_token"][0] is adds_bos
    assert keys["tokenizer.ggml.add_eos_token"][0] is False
    assert (keys["tokenizer.ggml.bos_token_id"][0], keys["tokenizer.ggml.eos_token_id"][0]) == (0, 1)


def test_the_tokenizer_kinds_split_as_their_families_do(tokenizer_cache):
    from tools.kits.tokenizer_kit import build_tokenizer

    text = "Snow fell 2024 times on the héron ☃."
    digits = {}
    for kind in ("llama3", "qwen2", "sentencepiece"):
        tokenizer = build_tokenizer(512, cache_dir=tokenizer_cache, kind=kind)
        encoding = tokenizer.encode(text)
        assert tokenizer.decode(encoding.ids) == text  # byte-level or byte fallback: any text round-trips
        pieces = [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)]
        digits[kind] = [piece for piece in pieces if piece.strip("Ġ▁").isdigit()]
    # Qwen 2 splits numbers into single digits, Llama 3 into runs of up to three.
    assert (digits["qwen2"], digits["llama3"]) == (["2", "0", "2", "4"], ["202", "4"])
    sentencepiece = build_tokenizer(512, cache_dir=tokenizer_cache, kind="sentencepiece").get_vocab()
    assert sentencepiece["<0x00>"] == 6 and sentencepiece["<0xFF>"] == 261 and sentencepiece["<unk>"] == 5


@pytest.mark.parametrize(
    ("config", "bases", "scaling"),
    [
        ({"rope_theta": 5e5}, (5e5, 1e4), None),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, (1e6, 1e4), None),  # transformers 5
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                }
            },
            (1e6, 1e4),
            "linear",
        ),
        ({"rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}, (5e5, 1e4), "llama3"),
    ],
)
def test_rope_settings_are_read_from_either_config_layout(config, bases, scaling):
    from unsloth.mlx.gguf.convert import rope_base, rope_scaling

    assert (rope_base(config), rope_base(config, local=True)) == bases
    assert (rope_scaling(config) or {}).get("rope_type") == scaling


def test_a_rope_scaling_llama_cpp_is_not_given_here_is_refused_by_name():
    from unsloth.mlx.gguf.convert import UnsupportedModel, rope_scaling

    with pytest.raises(UnsupportedModel, match="rope_scaling of type 'yarn'"):
        rope_scaling({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("exaone4", {"sliding_window": 8, "sliding_window_pattern": "LLLG"}, "exaone4 with sliding-window layers"),
        ("cohere2", {"layer_norm_bias": True}, "cohere2 with layer_norm_bias=True"),
        ("cohere2", {"attention_bias": True}, "cohere2 with attention_bias=True"),
    ],
)
def test_a_setting_a_newer_family_cannot_honour_is_refused_by_name(name, change, message):
    from tools.kits.tiny_gguf_families import GENERIC_FAMILIES
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    assert family_for(GENERIC_FAMILIES[name]()).architecture == name  # the kit's own config is exported
    with pytest.raises(UnsupportedModel, match=message):
        family_for({**GENERIC_FAMILIES[name](), **change})


def test_olmo3_writes_its_sliding_layers_as_llama_cpp_reads_them(tmp_path):
    import gguf

    from tools.kits.tiny_gguf_families import GENERIC_FAMILIES
    from unsloth.mlx.gguf.convert import write_hyperparameters

    config = {key: value for key, value in GENERIC_FAMILIES["olmo3"]().items() if key != "layer_types"}
    writer = gguf.GGUFWriter(str(tmp_path / "keys.gguf"), "olmo2")
    write_hyperparameters(writer, config)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(tmp_path / "keys.gguf"))
    # mlx_lm's default without layer_types: every 4th layer global.
    assert list(reader.fields["olmo2.attention.sliding_window_pattern"].contents()) == [True, True, True, False]
    assert reader.fields["olmo2.attention.sliding_window"].contents() == 8


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("glm", {"head_dim": 32}, "glm with head_dim 32 x 4 heads != hidden_size 256"),
        ("qwen3_next", {"linear_value_head_dim": 64}, "linear_key_head_dim 32 != linear_value_head_dim 64"),
        ("qwen3_next", {"mlp_only_layers": [0]}, "llama.cpp's qwen3next loads experts in every layer"),
        ("qwen3_next", {"decoder_sparse_step": 2}, "llama.cpp's qwen3next loads experts in every layer"),
        ("qwen3_next", {"norm_topk_prob": False}, "qwen3_next with norm_topk_prob=False"),
        ("qwen3_next", {"attention_bias": True}, "qwen3_next with attention_bias=True"),
        ("qwen3_next", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "qwen3_next with rope type 'yarn'"),
        ("llama4", {"attention_chunk_size": 4096}, "llama4 with attention_chunk_size=4096"),
        ("llama4", {"floor_scale": 4096}, "llama4 with floor_scale=4096"),
        ("llama4", {"attn_scale": 0.2}, "llama4 with attn_scale=0.2"),
        ("llama4", {"attn_temperature_tuning": 0}, "llama4 with attn_temperature_tuning off"),
        ("llama4", {"use_qk_norm": False}, "llama4 with use_qk_norm=False and 4 experts"),
        ("llama4", {"attention_bias": True}, "llama4 with attention_bias=True"),
    ],
)
def test_a_setting_an_untrained_checked_family_cannot_honour_is_refused_by_name(name, change, message):
    from tools.kits.tiny_gguf_families import UNTRAINED_FAMILIES
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for
    from unsloth.mlx.gguf.families import unwrap_text_model

    config = unwrap_text_model(UNTRAINED_FAMILIES[name]())[0]
    family_for(config)  # the kit's own config is exported
    with pytest.raises(UnsupportedModel, match=message):
        family_for({**config, **change})


def test_llama4_text_alone_is_refused_as_mlx_lm_runs_it_dense():
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    with pytest.raises(UnsupportedModel, match="mlx_lm's llama4_text is a dense model"):
        family_for({"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"]})


def test_glm_writes_the_whole_head_rotated_as_mlx_lm_runs_it(tmp_path):
    import gguf

    from tools.kits.tiny_gguf_families import UNTRAINED_FAMILIES
    from unsloth.mlx.gguf.convert import write_hyperparameters

    # glm-4-9b-chat-hf's config says half, with a linear scaling; mlx_lm's glm reads neither.
    config = {
        **UNTRAINED_FAMILIES["glm"](),
        "partial_rotary_factor": 0.5,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    }
    writer = gguf.GGUFWriter(str(tmp_path / "keys.gguf"), "chatglm")
    write_hyperparameters(writer, config)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(tmp_path / "keys.gguf"))
    assert reader.fields["chatglm.rope.dimension_count"].contents() == 64
    assert "chatglm.rope.scaling.type" not in reader.fields
