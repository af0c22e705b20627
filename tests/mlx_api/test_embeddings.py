"""Issue 48 on MLX alone (no torch needed): `FastSentenceTransformer` loads a tiny sentence-transformers folder,
answers ST's model methods, puts LoRA on named modules, refuses what it cannot run by name, and trains."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tools.kits.tiny_embedding_model import build_tiny_embedding_model
from unsloth import FastSentenceTransformer

TEXTS = ["The sun is a star.", "Rice needs water and heat to cook well.", "hi", "Plants grow toward light."]
BERT_TARGETS = ["value", "key", "dense", "query"]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory: pytest.TempPathFactory):
    return build_tiny_embedding_model(tmp_path_factory.mktemp("bert") / "model", "bert")


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory: pytest.TempPathFactory):
    return build_tiny_embedding_model(tmp_path_factory.mktemp("qwen3") / "model", "qwen3")


def test_encode_answers_as_sentence_transformers_does(bert_folder) -> None:
    model = FastSentenceTransformer.from_pretrained(str(bert_folder), max_seq_length=32)
    many = model.encode(TEXTS)
    assert isinstance(many, np.ndarray) and many.shape == (4, model.get_sentence_embedding_dimension())
    assert model.encode(TEXTS[0]).shape == (32,)
    # Batches sorted by length and put back: any batch size gives the same rows in the caller's order.
    assert np.allclose(model.encode(TEXTS, batch_size=1), many, atol=1e-5)
    # The folder's Normalize module, so each row has unit length.
    assert np.allclose(np.linalg.norm(many, axis=-1), 1.0, atol=1e-5)
    assert model.max_seq_length == 32 and model.tokenizer is not None
    scores = model.similarity(mx.array(many[:1]), mx.array(many))
    assert isinstance(scores, mx.array) and scores.shape == (1, 4)
    assert abs(scores[0, 0].item() - 1.0) < 1e-5


def test_prompts_come_from_the_folder_and_unknown_names_are_refused(qwen3_folder) -> None:
    model = FastSentenceTransformer.from_pretrained(str(qwen3_folder))
    assert set(model.prompts) == {"query"}
    plain, prompted = model.encode(TEXTS), model.encode(TEXTS, prompt_name="query")
    assert np.allclose(prompted, model.encode(TEXTS, prompt=model.prompts["query"]), atol=1e-6)
    assert not np.allclose(plain, prompted, atol=1e-3)
    with pytest.raises(ValueError, match="document"):
        model.encode(TEXTS, prompt_name="document")


def test_left_padding_leaves_every_row_finite_and_unchanged(qwen3_folder) -> None:
    """Last-token pooling over left-padded rows: each row alone equals itself in a padded batch (no NaN)."""
    model = FastSentenceTransformer.from_pretrained(str(qwen3_folder))
    batched = model.encode(TEXTS, batch_size=4)
    assert np.isfinite(batched).all()
    assert np.allclose(batched, model.encode(TEXTS, batch_size=1), atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "qwen3"])
def test_token_batches_equal_the_tokenizers_own_padding(bert_folder, qwen3_folder, family: str) -> None:
    """The trainer's cached rows, padded (bert's tokenizer pads right, qwen3's left), are what `tokenize` gives."""
    model = FastSentenceTransformer.from_pretrained(
        str(bert_folder if family == "bert" else qwen3_folder), max_seq_length=8
    )
    prompt = "query: "
    expected = model.tokenize([prompt + text for text in TEXTS])
    ids, mask = model.token_batch(model.token_rows(TEXTS, prompt), prompt)[:2]
    assert np.array_equal(np.array(ids), np.array(expected["input_ids"]))
    assert np.array_equal(np.array(mask), np.array(expected["attention_mask"]))


def test_trainer_rows_are_tokenized_once(bert_folder) -> None:
    from datasets import Dataset

    from unsloth.mlx.embeddings.trainer import EmbeddingRows

    model = FastSentenceTransformer.from_pretrained(str(bert_folder), max_seq_length=16)
    tokenized: list = []
    real = model.token_rows
    object.__setattr__(model, "token_rows", lambda texts, prompt="": tokenized.extend(texts) or real(texts, prompt))
    rows = EmbeddingRows(Dataset.from_dict({"anchor": TEXTS, "positive": TEXTS[::-1]}))
    first, _ = rows.batch(np.array([0, 1]), model, ["", ""])
    rows.batch(np.array([1, 2, 0]), model, ["", ""])
    again, _ = rows.batch(np.array([0, 1]), model, ["", ""])
    # Rows 0 and 1 on first use, row 2 on its own, never again; the same batch pads to the same ids.
    assert sorted(tokenized) == sorted(TEXTS[:3] + TEXTS[::-1][:3])
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(first[0] + first[1], again[0] + again[1]))


def test_lora_on_named_modules_freezes_the_rest(bert_folder) -> None:
    model = FastSentenceTransformer.from_pretrained(str(bert_folder))
    model = FastSentenceTransformer.get_peft_model(
        model, r=4, target_modules=BERT_TARGETS, lora_alpha=8, task_type="FEATURE_EXTRACTION"
    )
    trainable = [name for name, _ in tree_flatten(model.trainable_parameters())]
    assert trainable and all(name.endswith((".lora_a", ".lora_b")) for name in trainable)
    # PEFT's suffix rule: `dense` reaches the attention output, the intermediate and the output projections.
    adapted = {name.split(".layer.")[1].split(".", 1)[1].rsplit(".", 1)[0] for name in trainable}
    assert adapted == {
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "intermediate.dense",
        "output.dense",
    }


def test_refusals_name_what_cannot_run(bert_folder, tmp_path) -> None:
    model = FastSentenceTransformer.from_pretrained(str(bert_folder))
    with pytest.raises(NotImplementedError, match="task_type='SEQ_CLS'"):
        FastSentenceTransformer.get_peft_model(model, r=4, target_modules=BERT_TARGETS, task_type="SEQ_CLS")
    with pytest.raises(ValueError, match="querry"):
        FastSentenceTransformer.get_peft_model(model, r=4, target_modules=["querry"])
    with pytest.raises(NotImplementedError, match="load_in_4bit"):
        FastSentenceTransformer.from_pretrained(str(bert_folder), load_in_4bit=True)
    with pytest.raises(NotImplementedError, match="q4_k_m"):
        model.save_pretrained_gguf(str(tmp_path / "gguf"), quantization_method="q4_k_m")
    max_pooled = build_tiny_embedding_model(tmp_path / "max", "bert")
    pooling = json.loads((max_pooled / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (max_pooled / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(NotImplementedError, match="llama.cpp pools an embedding model by mean, cls, lasttoken"):
        FastSentenceTransformer.from_pretrained(str(max_pooled)).save_pretrained_gguf(str(tmp_path / "gguf"))
    assert not (tmp_path / "gguf").exists()
    with pytest.raises(NotImplementedError, match="train_datasets"):
        model.push_to_hub("me/model", train_datasets=["pairs"])
    other = tmp_path / "mpnet"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "mpnet"}))
    with pytest.raises(NotImplementedError, match="'mpnet'"):
        FastSentenceTransformer.from_pretrained(str(other))


def test_offline_push_names_the_repository_and_the_cause(bert_folder) -> None:
    from unsloth.mlx.models.hub import HubUploadError

    # This folder's conftest sets HF_HUB_OFFLINE before huggingface_hub loads, so nothing can leave.
    model = FastSentenceTransformer.from_pretrained(str(bert_folder))
    with pytest.raises(HubUploadError, match="me/offline.*HF_HUB_OFFLINE"):
        model.push_to_hub_merged("me/offline", tokenizer=model.tokenizer, save_method="merged_16bit")
    with pytest.raises(HubUploadError, match="me/offline"):
        model.tokenizer.push_to_hub("me/offline")


def test_full_finetuning_trains_every_weight(bert_folder) -> None:
    model = FastSentenceTransformer.from_pretrained(str(bert_folder), full_finetuning=True)
    trainable = dict(tree_flatten(model.trainable_parameters()))
    assert trainable.keys() == dict(tree_flatten(model.parameters())).keys()
    assert FastSentenceTransformer.get_peft_model(model, r=4, target_modules=BERT_TARGETS) is model
    assert dict(tree_flatten(model.trainable_parameters())).keys() == trainable.keys()


def ranking_loss_by_hand(queries: np.ndarray, docs: np.ndarray, scale: float) -> float:
    """MNRL written out: cross-entropy of each query's scaled cosine row against its own document."""
    q = queries / np.linalg.norm(queries, axis=-1, keepdims=True)
    d = docs / np.linalg.norm(docs, axis=-1, keepdims=True)
    scores = scale * q @ d.T
    log_z = np.log(np.exp(scores).sum(axis=1))
    return float(-(np.diag(scores[:, : len(queries)]) - log_z).mean())


@pytest.mark.parametrize("negatives", [0, 1])
def test_ranking_loss_uses_every_other_row_as_a_negative(negatives: int) -> None:
    from unsloth.mlx.embeddings.losses import RankingLoss

    rng = np.random.default_rng(0)
    columns = [rng.normal(size=(5, 8)).astype(np.float32) for _ in range(2 + negatives)]
    expected = ranking_loss_by_hand(columns[0], np.concatenate(columns[1:]), 20.0)
    assert abs(RankingLoss()([mx.array(c) for c in columns]).item() - expected) < 1e-5


def test_adapters_are_saved_in_peft_layout(bert_folder, tmp_path) -> None:
    model = FastSentenceTransformer.from_pretrained(str(bert_folder))
    model = FastSentenceTransformer.get_peft_model(model, r=4, target_modules=["query"], lora_alpha=8)
    model.save_pretrained(str(tmp_path / "lora"))
    config = json.loads((tmp_path / "lora" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["task_type"], config["r"], config["lora_alpha"]) == (
        "LORA",
        "FEATURE_EXTRACTION",
        4,
        8.0,
    )
    weights = mx.load(str(tmp_path / "lora" / "adapter_model.safetensors"))
    assert weights["base_model.model.encoder.layer.0.attention.self.query.lora_A.weight"].shape == (4, 32)
    assert weights["base_model.model.encoder.layer.0.attention.self.query.lora_B.weight"].shape == (32, 4)
    # The notebook's reload cell: the adapter folder loads as its base with the adapters on top.
    model.update(
        {"backbone": {"encoder": {"layer": [{"attention": {"self": {"query": {"lora_b": mx.ones((4, 32))}}}}] * 2}}}
    )
    model.save_pretrained(str(tmp_path / "lora"))
    reloaded = FastSentenceTransformer.from_pretrained(str(tmp_path / "lora"))
    assert np.allclose(reloaded.encode(TEXTS), model.encode(TEXTS), atol=1e-5)
    assert not np.allclose(
        reloaded.encode(TEXTS), FastSentenceTransformer.from_pretrained(str(bert_folder)).encode(TEXTS)
    )
    modules = json.loads((tmp_path / "lora" / "modules.json").read_text())
    assert [entry["path"] for entry in modules] == ["", "1_Pooling", "2_Normalize"]
    assert not (tmp_path / "lora" / "config.json").exists()
