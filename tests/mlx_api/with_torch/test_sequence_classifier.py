"""Issue 48 item 5: the bert_classification notebook's ModernBERT classifier on MLX, against transformers'
ModernBertForSequenceClassification (and PEFT's SEQ_CLS LoRA) on CPU torch, fp32, on a tiny ModernBERT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# transformers' Trainer, given PEFT's model, asks a deprecated property of itself.
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")

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


def _rows(tokenizer, texts: list[str], labels: list[int]):
    from datasets import Dataset

    return Dataset.from_dict({"text": texts, "labels": labels}).map(lambda rows: tokenizer(rows["text"]), batched=True)


def _arguments(tmp_path: Path, **overrides):
    from transformers import TrainingArguments

    settings = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=len(TEXTS),
        max_steps=1,
        learning_rate=5e-5,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=3407,
    )
    return TrainingArguments(**{**settings, **overrides})


LORA = dict(r=4, lora_alpha=8, target_modules=["Wqkv", "Wo", "Wi"])


def _torch_step0_loss(folder: Path, tmp_path: Path, labels: list[int]) -> float:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder))
    model = get_peft_model(base, LoraConfig(task_type="SEQ_CLS", lora_dropout=0.0, **LORA))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    trainer = transformers.Trainer(
        model=model,
        args=_arguments(tmp_path, use_cpu=True, dataloader_pin_memory=False),
        train_dataset=_rows(tokenizer, TEXTS, labels),
        processing_class=tokenizer,
    )
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def test_step0_loss_equals_transformers_trainer_with_peft(torch_folder: Path, tmp_path: Path) -> None:
    from transformers import Trainer

    from unsloth import FastModel

    labels = [0, 2, 1]
    expected = _torch_step0_loss(torch_folder, tmp_path / "torch", labels)
    model, tokenizer = _load(torch_folder)
    model = FastModel.get_peft_model(model, task_type="SEQ_CLS", **LORA)
    trainer = Trainer(
        model=model,
        args=_arguments(tmp_path / "mlx"),
        train_dataset=_rows(tokenizer, TEXTS, labels),
        processing_class=tokenizer,
    )
    assert type(trainer).__name__ == "ClassifierTrainer"
    trainer.train()
    ours = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
    assert abs(ours - expected) < 1e-4, (ours, expected)


def test_regression_and_multi_label_losses_are_transformers(torch_folder: Path) -> None:
    import mlx.core as mx

    from unsloth.mlx.embeddings.classifier import classification_loss

    logits = np.array([[0.3, -1.2, 2.0], [1.0, 0.1, -0.4]], dtype=np.float32)
    targets = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    bce = torch.nn.BCEWithLogitsLoss()(torch.tensor(logits), torch.tensor(targets)).item()
    mse = torch.nn.MSELoss()(torch.tensor(logits[:, 0]), torch.tensor(targets[:, 0])).item()
    ours_bce = classification_loss(mx.array(logits), mx.array(targets), "multi_label_classification").item()
    ours_mse = classification_loss(mx.array(logits[:, :1]), mx.array(targets[:, 0]), "regression").item()
    assert abs(ours_bce - bce) < 1e-6 and abs(ours_mse - mse) < 1e-6


def test_trainer_evaluates_with_compute_metrics_and_lora_save_reloads_on_torch(
    torch_folder: Path, tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import Trainer

    from unsloth import FastModel

    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmax(axis=-1) == labels).mean())}

    model, tokenizer = _load(torch_folder)
    model = FastModel.get_peft_model(model, task_type="SEQ_CLS", **LORA)
    rows = _rows(tokenizer, TEXTS * 2, [0, 2, 1] * 2)
    trainer = Trainer(
        model=model,
        args=_arguments(tmp_path, max_steps=3, learning_rate=1e-2, eval_strategy="steps", eval_steps=3),
        train_dataset=rows,
        eval_dataset=rows,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    trainer.train()
    evaluated = [entry for entry in trainer.state.log_history if "eval_accuracy" in entry]
    assert evaluated and "eval_loss" in evaluated[0]
    folder = tmp_path / "bert_classification_lora"
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    # The classifier was trained (modules_to_save), so it must come back from the adapter, not the base.
    base = transformers.AutoModelForSequenceClassification.from_pretrained(str(torch_folder))
    reloaded = PeftModel.from_pretrained(base, str(folder)).eval()
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = reloaded(**inputs).logits.numpy()
    model.eval()
    np.testing.assert_allclose(np.array(model(**inputs).logits), theirs, atol=1e-4)
    assert not np.allclose(theirs, _torch_logits(torch_folder, TEXTS), atol=1e-3)
    again, _ = _load(folder)  # the notebook's reload: the adapter folder by name
    np.testing.assert_allclose(np.array(again(**inputs).logits), theirs, atol=1e-4)


def test_full_finetune_of_a_bare_backbone_saves_a_classifier_transformers_loads(tmp_path: Path) -> None:
    """The notebook's path: full_finetuning=True on a checkpoint without a head (transformers' init for it), then
    save_pretrained writes ModernBertForSequenceClassification's folder with the labels."""
    from tools.kits.tiny_embedding_model import build_tiny_embedding_model

    base = build_tiny_embedding_model(tmp_path / "base", "modernbert")
    model, tokenizer = _load(base, num_labels=3, id2label=LABELS, full_finetuning=True)
    std = float(np.array(model.classifier.weight).std())
    assert 0.5 * 32**-0.5 < std < 32**-0.5, std  # transformers' truncated normal, std hidden_size ** -0.5
    folder = tmp_path / "saved"
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    np.testing.assert_allclose(np.array(model(**inputs).logits), _torch_logits(folder, TEXTS), atol=1e-4)
    assert transformers.AutoConfig.from_pretrained(str(folder)).id2label == LABELS


def test_sentiment_pipeline_answers_as_transformers_pipeline(torch_folder: Path) -> None:
    from transformers import pipeline

    model, tokenizer = _load(torch_folder)
    ours = pipeline("sentiment-analysis", model=model, tokenizer=tokenizer)(TEXTS[0])
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(str(torch_folder))
    theirs = pipeline("sentiment-analysis", model=reference, tokenizer=tokenizer, device="cpu")(TEXTS[0])
    assert ours[0]["label"] == theirs[0]["label"]
    assert abs(ours[0]["score"] - theirs[0]["score"]) < 1e-4


def test_another_family_as_a_classifier_is_refused_by_name(tmp_path: Path) -> None:
    from tools.kits.tiny_embedding_model import build_tiny_embedding_model

    base = build_tiny_embedding_model(tmp_path / "bert", "bert")
    with pytest.raises(NotImplementedError, match="'bert' checkpoint is not supported on MLX"):
        _load(base, num_labels=2)
