"""Issue 48 item 5: the bert_classification notebook's ModernBERT classifier on MLX, against transformers'
ModernBertForSequenceClassification (and PEFT's SEQ_CLS LoRA) on CPU torch, fp32, on a tiny ModernBERT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LABELS = {0: "sadness", 1: "joy", 2: "love"}
# Rows longer than the tiny model's local window (16), and padded, so both attention kinds and the mask count.
TEXTS = [
    "we just finished training modernbert and it is amazing " * 3,
    "sad news",
    "i love this so much it makes me happy every single day",
]


@pytest.fixture(scope="module")
def torch_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ModernBERT saved by transformers' classifier (its head seeded by torch), the layout a hub
    checkpoint with a head has."""
    from tools.kits.tiny_embedding_model import build_tiny_embedding_model

    base = build_tiny_embedding_model(tmp_path_factory.mktemp("base"), "modernbert")
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(base), num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    )
    folder = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(str(folder))
    transformers.AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(folder))
    return folder


def _torch_logits(folder: Path, texts: list[str], mean: bool = False) -> np.ndarray:
    extra = {"classifier_pooling": "mean"} if mean else {}
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder), **extra).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        return model(**tokenizer(texts, padding=True, return_tensors="pt")).logits.numpy()


def _load(folder: Path, **kwargs):
    from transformers import AutoModelForSequenceClassification

    from unsloth import FastModel

    return FastModel.from_pretrained(
        str(folder), auto_model=AutoModelForSequenceClassification, load_in_4bit=False, **kwargs
    )


@pytest.mark.parametrize("mean", [False, True], ids=["cls", "mean"])
def test_logits_equal_transformers_classifier(torch_folder: Path, mean: bool) -> None:
    model, tokenizer = _load(torch_folder, **({"classifier_pooling": "mean"} if mean else {}))
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    ours = np.array(model(**inputs).logits)
    assert model.config.id2label == LABELS
    np.testing.assert_allclose(ours, _torch_logits(torch_folder, TEXTS, mean), atol=1e-4)
