"""Issue 48: each embedding family's GGUF converter (`gguf/converters/embeddings.py`) takes the tiny kit's config as
the notebooks' models have it, and refuses by name each setting llama.cpp's graph for it would run differently."""

from __future__ import annotations

import json

import pytest

from tools.kits.tiny_embedding_model import FAMILIES, IDENTITY, TANH, build_tiny_embedding_model
from unsloth.mlx.gguf.convert import family_for
from unsloth.mlx.gguf.converters.embeddings import DENSE_KEY, EMBEDDING_CONVERTERS
from unsloth.mlx.gguf.families import POOLING_KEY, UnsupportedModel
from unsloth.mlx.gguf.vocabularies import embedding_vocabulary_keys

ARCHITECTURES = {
    "bert": "bert",
    "xlm-roberta": "bert",
    "modernbert": "modern-bert",
    "qwen3": "qwen3",
    "gemma3_text": "gemma-embedding",
}
GEMMA_DENSE = [
    {"in": 32, "out": 128, "bias": False, "activation": IDENTITY},
    {"in": 128, "out": 32, "bias": False, "activation": IDENTITY},
]


def config_of(family: str, **changes) -> dict:
    row = FAMILIES[family]
    dense = GEMMA_DENSE if row.dense else []
    return {**row.config, POOLING_KEY: row.pooling, DENSE_KEY: dense, **changes}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_is_written_as_its_llama_cpp_architecture(family: str) -> None:
    assert family_for(config_of(family)).architecture == ARCHITECTURES[family]


def test_the_text_models_sharing_a_type_keep_their_own_converter() -> None:
    assert family_for(FAMILIES["gemma3_text"].config).architecture == "gemma3"


@pytest.mark.parametrize(
    "family, changes, message",
    [
        ("bert", {POOLING_KEY: "max"}, "pools an embedding model by mean, cls, lasttoken only, not 'max'"),
        ("bert", {DENSE_KEY: GEMMA_DENSE[:1]}, "room for 0 Dense layers after the pooling, not 1"),
        ("bert", {"hidden_act": "gelu_new"}, "computes GELU, not 'gelu_new'"),
        ("modernbert", {"norm_bias": True}, "norm_bias=True"),
        ("modernbert", {"hidden_activation": "silu"}, "GELU only, not 'silu'"),
        ("gemma3_text", {"use_bidirectional_attention": False}, "attends both ways"),
        ("gemma3_text", {"query_pre_attn_scalar": 16}, "query_pre_attn_scalar 16"),
        ("gemma3_text", {"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
        ("gemma3_text", {DENSE_KEY: GEMMA_DENSE[:1]}, "room for 0 or 2 Dense layers after the pooling, not 1"),
        (
            "gemma3_text",
            {DENSE_KEY: [GEMMA_DENSE[0], {**GEMMA_DENSE[1], "activation": TANH}]},
            "no bias or activation; layer 1",
        ),
        ("bert", {"model_type": "mpnet"}, "cannot write a 'mpnet' embedding model"),
    ],
)
def test_what_llama_cpp_would_run_differently_is_refused_by_name(family: str, changes: dict, message: str) -> None:
    with pytest.raises(UnsupportedModel, match=message):
        family_for(config_of(family, **changes))


def _tokenizer_folder(tmp_path, spec: dict):
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    return tmp_path


def test_a_tokenizer_kind_not_checked_for_the_family_is_refused_by_name(tmp_path) -> None:
    folder = _tokenizer_folder(tmp_path, {"model": {"type": "WordPiece", "vocab": {}}})
    with pytest.raises(UnsupportedModel, match="checked with llama.cpp for BPE tokenizers, not 'WordPiece'"):
        embedding_vocabulary_keys(folder, 8, EMBEDDING_CONVERTERS["qwen3"].vocabularies)


def test_a_unigram_normalizer_llama_cpp_does_not_apply_is_refused_by_name(tmp_path) -> None:
    spec = {"model": {"type": "Unigram", "vocab": [["<unk>", 0.0]], "unk_id": 0}, "normalizer": {"type": "NFD"}}
    with pytest.raises(UnsupportedModel, match=r"does not apply the normalizers \['NFD'\]"):
        embedding_vocabulary_keys(_tokenizer_folder(tmp_path, spec), 8, ("Unigram",))


def test_a_byte_level_modernbert_is_written_as_llama_cpp_reads_gte_modernbert(tmp_path) -> None:
    # gte-modernbert-base's tokenizer is a byte-level BPE that wraps each text in [CLS] x [SEP]; llama.cpp's
    # modern-bert reads it as a gpt2 vocabulary whose BOS and EOS are those two, both added.
    from transformers import AutoTokenizer

    folder = build_tiny_embedding_model(tmp_path, "modernbert")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    vocab_size = FAMILIES["modernbert"].config["vocab_size"]
    keys = embedding_vocabulary_keys(folder, vocab_size, EMBEDDING_CONVERTERS["modernbert"].vocabularies)
    assert keys["tokenizer.ggml.model"][0] == "gpt2"
    assert keys["tokenizer.ggml.bos_token_id"][0] == tokenizer.cls_token_id
    assert keys["tokenizer.ggml.eos_token_id"][0] == tokenizer.sep_token_id
    assert keys["tokenizer.ggml.add_bos_token"][0] and keys["tokenizer.ggml.add_eos_token"][0]
    assert keys["tokenizer.ggml.seperator_token_id"][0] == tokenizer.sep_token_id
