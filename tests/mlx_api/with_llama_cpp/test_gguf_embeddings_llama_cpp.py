"""Issue 48: an embedding model's `save_pretrained_gguf` read by llama.cpp itself, one tiny model per family the
notebooks train (BERT, XLM-RoBERTa, ModernBERT, Qwen3-Embedding, EmbeddingGemma with its Dense layers): the same
token ids as the Hugging Face tokenizer, and the same sentence embeddings as the MLX model."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tools.kits.tiny_embedding_model import FAMILIES, build_tiny_embedding_model
from unsloth import FastSentenceTransformer

from .llama_cpp_greedy import THREADS

# Each notebook's get_peft_model target_modules, by the family its model belongs to.
TARGETS = {
    "bert": ["value", "key", "dense", "query"],
    "xlm-roberta": ["key", "query", "dense", "value"],
    "modernbert": ["Wi", "Wo", "Wqkv"],
    "qwen3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gemma3_text": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
# The fourth row is one NFKC and space collapsing change (full-width letters, a ligature, doubled spaces); the last
# runs past ModernBERT's local window (16) and EmbeddingGemma's sliding window (8).
TEXTS = [
    "The sun rises in the east.",
    "Rice needs water, heat and time.",
    "hi",
    "Ｔｈｅ  ﬁne  rice",
    "A comet's tail points away from the sun because the solar wind pushes it outward, whatever way it moves.",
]


def test_every_embedding_family_has_a_row() -> None:
    assert set(TARGETS) == set(FAMILIES)


@pytest.fixture(scope="module", params=sorted(TARGETS))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from unsloth.mlx.embeddings.saving import _lora_modules

    family = request.param
    root = tmp_path_factory.mktemp(f"embedding-gguf-{family}")
    model = FastSentenceTransformer.from_pretrained(str(build_tiny_embedding_model(root / "model", family)))
    model = FastSentenceTransformer.get_peft_model(model, r=8, target_modules=TARGETS[family])
    # A fresh LoRA changes nothing (B is zero); a random B makes the fold into the file count.
    mx.random.seed(1)
    for module in _lora_modules(model).values():
        module.lora_b = mx.random.normal(module.lora_b.shape) * 0.2
    paths = model.save_pretrained_gguf(str(root / "gguf"), quantization_method=["f16", "f32"])
    return {"model": model, "paths": paths}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("index", [0, 1], ids=["f16", "f32"])
def test_llama_cpp_gives_the_mlx_embeddings_back(exported: dict, index: int) -> None:
    from llama_cpp import Llama

    model, path = exported["model"], exported["paths"][index]
    assert path.name == ("unsloth.F16.gguf", "unsloth.F32.gguf")[index]
    llm = Llama(str(path), embedding=True, n_ctx=128, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    try:
        tokens = [llm.tokenize(text.encode(), add_bos=True, special=True) for text in TEXTS]
        theirs = np.array(llm.embed(TEXTS))
    finally:
        llm.close()
    assert tokens == [model.tokenizer(text)["input_ids"] for text in TEXTS]
    assert cosines(np.asarray(model.encode(TEXTS)), theirs).min() >= 0.999
