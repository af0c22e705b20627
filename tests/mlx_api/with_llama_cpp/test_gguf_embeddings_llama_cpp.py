"""Issue 48: an embedding model's `save_pretrained_gguf` (all-MiniLM-L6-v2's family, `bert`) read by llama.cpp
itself: the same token ids as the Hugging Face tokenizer, and the same sentence embeddings as the MLX model."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tools.kits.tiny_embedding_model import build_tiny_embedding_model
from unsloth import FastSentenceTransformer

TEXTS = ["The sun rises in the east.", "Rice needs water, heat and time.", "hi"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from unsloth.mlx.embeddings.saving import _lora_modules

    root = tmp_path_factory.mktemp("embedding-gguf")
    model = FastSentenceTransformer.from_pretrained(str(build_tiny_embedding_model(root / "bert", "bert")))
    model = FastSentenceTransformer.get_peft_model(model, r=8, target_modules=["value", "key", "dense", "query"])
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
    llm = Llama(str(path), embedding=True, n_ctx=128, n_threads=2, verbose=False)
    try:
        tokens = [llm.tokenize(text.encode(), add_bos=True) for text in TEXTS]
        theirs = np.array(llm.embed(TEXTS))
    finally:
        llm.close()
    assert tokens == [model.tokenizer(text)["input_ids"] for text in TEXTS]
    assert cosines(model.encode(TEXTS), theirs).min() >= 0.999
