"""Issue 48: embedding models on MLX against sentence-transformers itself on CPU torch, fp32, tiny random models.

The MLX embeddings equal ST's (cosine >= 0.9999) for each family we load; our MNRL equals ST's loss within 1e-5;
a saved folder (merged, or adapters in PEFT's layout) loaded by ST gives the MLX embeddings back; the notebook's
`SentenceTransformerTrainer` call trains on MLX; full fine-tuning steps follow ST's own trainer.
"""

from __future__ import annotations

import numpy as np
import pytest

from tools.kits.tiny_embedding_model import FAMILIES, build_tiny_embedding_model
from unsloth import FastSentenceTransformer

# Each notebook's get_peft_model target_modules, by the family its model belongs to.
NOTEBOOK_TARGETS = {
    "bert": ["value", "key", "dense", "query"],
    "xlm-roberta": ["key", "query", "dense", "value"],
    "modernbert": ["Wi", "Wo", "Wqkv"],
    "qwen3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gemma3_text": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}
# Lengths that differ a lot, so rows are padded (left for Qwen3, right for BERT) inside one batch.
TEXTS = [
    "The sun rises in the east and sets in the west.",
    "Rice needs water, heat and time.",
    "Plants grow toward light.",
    "A comet's tail points away from the sun because the solar wind pushes it outward.",
    "hi",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("embedding-models")
    return {family: build_tiny_embedding_model(root / family, family) for family in FAMILIES}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def reference(folder) -> object:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_embeddings_equal_sentence_transformers(folders: dict, family: str) -> None:
    model = FastSentenceTransformer.from_pretrained(str(folders[family]), max_seq_length=64)
    st = reference(folders[family])
    ours, theirs = model.encode(TEXTS, batch_size=4), st.encode(TEXTS, batch_size=4)
    assert ours.shape == theirs.shape
    assert cosines(ours, theirs).min() >= 0.9999
    for name in model.prompts:
        prompted = model.encode(TEXTS, prompt_name=name)
        assert cosines(prompted, st.encode(TEXTS, prompt_name=name)).min() >= 0.9999
        assert not np.allclose(prompted, ours)


def mnrl_embeddings(columns: int) -> list:
    rng = np.random.default_rng(7)
    return [rng.normal(size=(6, 16)).astype(np.float32) for _ in range(columns)]


@pytest.mark.parametrize("columns", [2, 4], ids=["pairs", "two-negatives"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"scale": 7.5},
        {"directions": ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")},
        {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"},
    ],
    ids=["default", "scale", "all-directions", "per-direction"],
)
def test_mnrl_equals_sentence_transformers(folders: dict, columns: int, settings: dict) -> None:
    import mlx.core as mx
    import torch
    from sentence_transformers.sentence_transformer import losses

    from unsloth.mlx.embeddings.losses import embedding_loss

    model = FastSentenceTransformer.from_pretrained(str(folders["bert"]))
    st_loss = losses.MultipleNegativesRankingLoss(model, **settings)
    embeddings = mnrl_embeddings(columns)
    expected = st_loss.compute_loss_from_embeddings([torch.from_numpy(e) for e in embeddings], None).item()
    ours = embedding_loss(st_loss)([mx.array(e) for e in embeddings]).item()
    assert abs(ours - expected) < 1e-5


@pytest.mark.parametrize(
    "build, columns",
    [
        (lambda losses, model: losses.CoSENTLoss(model), 2),
        (lambda losses, model: losses.CoSENTLoss(model, scale=7.0), 2),
        (lambda losses, model: losses.TripletLoss(model), 3),
        (lambda losses, model: losses.TripletLoss(model, losses.TripletDistanceMetric.COSINE, 0.3), 3),
        (lambda losses, model: losses.TripletLoss(model, losses.TripletDistanceMetric.MANHATTAN, 1.0), 3),
    ],
    ids=["cosent", "cosent-scale", "triplet", "triplet-cosine", "triplet-manhattan"],
)
def test_cosent_and_triplet_equal_sentence_transformers(folders: dict, build, columns: int) -> None:
    import mlx.core as mx
    import torch
    from sentence_transformers.sentence_transformer import losses

    from unsloth.mlx.embeddings.losses import embedding_loss

    model = FastSentenceTransformer.from_pretrained(str(folders["bert"]))
    st_loss = build(losses, model)
    embeddings = mnrl_embeddings(columns)
    # Tied labels included: CoSENT orders only pairs whose labels differ.
    labels = np.array([0.1, 0.9, 0.5, 0.5, 0.0, 1.0], dtype=np.float32)
    expected = st_loss.compute_loss_from_embeddings(
        [torch.from_numpy(e) for e in embeddings], torch.from_numpy(labels)
    ).item()
    ours = embedding_loss(st_loss)([mx.array(e) for e in embeddings], mx.array(labels)).item()
    assert abs(ours - expected) < 1e-5 * max(1.0, abs(expected))


def pair_rows(count: int = 8):
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "anchor": [f"{text} ({i})" for i, text in enumerate(TEXTS * 2)][:count],
            "positive": [f"about: {text.lower()} {i}" for i, text in enumerate(TEXTS * 2)][:count],
        }
    )


def notebook_arguments(tmp_path, **overrides):
    from sentence_transformers import SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    # bf16 stays off: transformers refuses it on a CPU-only torch (on a Mac, MPS answers that it has bf16).
    values = dict(
        output_dir=str(tmp_path / "output"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        learning_rate=5e-3,
        logging_steps=1,
        warmup_steps=0,
        report_to="none",
        lr_scheduler_type="linear",
        save_strategy="no",
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        seed=3407,
    )
    return SentenceTransformerTrainingArguments(**{**values, **overrides})


@pytest.mark.parametrize("family", sorted(NOTEBOOK_TARGETS))
def test_notebook_cells_train_save_and_reload(folders: dict, family: str, tmp_path) -> None:
    """The embedding notebooks' cells: load, LoRA, MNRL through SentenceTransformerTrainer, save, reload in ST."""
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses

    from unsloth.mlx.embeddings.trainer import EmbeddingTrainer

    model = FastSentenceTransformer.from_pretrained(model_name=str(folders[family]), max_seq_length=64)
    model = FastSentenceTransformer.get_peft_model(
        model,
        r=8,
        target_modules=NOTEBOOK_TARGETS[family],
        lora_alpha=16,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing=False,
        random_state=3407,
        use_rslora=False,
        loftq_config=None,
        task_type="FEATURE_EXTRACTION",
    )
    before = model.encode(TEXTS)
    trainer = SentenceTransformerTrainer(
        model=model,
        train_dataset=pair_rows(),
        loss=losses.MultipleNegativesRankingLoss(model),
        args=notebook_arguments(tmp_path, max_steps=3),
    )
    assert isinstance(trainer, EmbeddingTrainer)
    assert trainer.train().global_step == 3
    after = model.encode(TEXTS)
    assert not np.allclose(before, after, atol=1e-4)
    model.save_pretrained(str(tmp_path / "lora"))
    model.tokenizer.save_pretrained(str(tmp_path / "lora"))
    assert (tmp_path / "lora" / "adapter_config.json").is_file()
    assert cosines(reference(tmp_path / "lora").encode(TEXTS), after).min() >= 0.999
    if family == "bert":
        model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer=model.tokenizer, save_method="merged_16bit")
        assert cosines(reference(tmp_path / "merged").encode(TEXTS), after).min() >= 0.999


def test_cosent_trains_on_a_score_column(folders: dict, tmp_path) -> None:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses

    rows = pair_rows().add_column("score", [i / 8 for i in range(8)])
    model = FastSentenceTransformer.from_pretrained(str(folders["bert"]), full_finetuning=True)
    trainer = SentenceTransformerTrainer(
        model=model, train_dataset=rows, loss=losses.CoSENTLoss(model), args=notebook_arguments(tmp_path, max_steps=2)
    )
    assert trainer.train().global_step == 2
    assert isinstance(rows, Dataset) and trainer.train_rows.columns == ["anchor", "positive"]
    assert all(np.isfinite(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry)


def test_information_retrieval_evaluator_runs_during_training(folders: dict, tmp_path) -> None:
    """The EmbeddingGemma notebook's evaluator cells: ST's evaluator on the MLX model, and as the trainer's."""
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    rows = pair_rows()
    evaluator = InformationRetrievalEvaluator(
        queries=dict(enumerate(rows["anchor"])),
        corpus=dict(enumerate(rows["positive"])),
        relevant_docs={i: [i] for i in range(len(rows))},
        show_progress_bar=False,
        batch_size=4,
    )
    model = FastSentenceTransformer.from_pretrained(str(folders["qwen3"]))
    ours = evaluator(model)
    theirs = evaluator(reference(folders["qwen3"]))
    key = next(name for name in theirs if name.endswith("ndcg@10"))
    assert abs(ours[key] - theirs[key]) < 1e-4
    model = FastSentenceTransformer.get_peft_model(model, r=4, target_modules=["q_proj", "v_proj"])
    trainer = SentenceTransformerTrainer(
        model=model,
        train_dataset=rows,
        eval_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(model),
        evaluator=evaluator,
        args=notebook_arguments(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1),
    )
    trainer.train()
    evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert len(evaluations) == 2 and all(f"eval_{key}" in entry for entry in evaluations)


def train_on_one_thread(trainer) -> None:
    """torch's trainer on one thread: on a tiny model its threads only fight over busy cores (1.4 s a step, not 0.07)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)


def test_full_finetuning_follows_sentence_transformers_trainer(folders: dict, tmp_path) -> None:
    """Every weight trained, one batch holding every row (so neither side's row order matters): step losses agree."""
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses

    rows = pair_rows(8)
    arguments = dict(per_device_train_batch_size=8, max_steps=4, learning_rate=1e-3, batch_sampler="batch_sampler")
    st = reference(folders["bert"])
    st_trainer = SentenceTransformerTrainer(
        model=st,
        train_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(st),
        args=notebook_arguments(tmp_path / "st", use_cpu=True, **arguments),
    )
    train_on_one_thread(st_trainer)
    model = FastSentenceTransformer.from_pretrained(str(folders["bert"]), full_finetuning=True)
    trainer = SentenceTransformerTrainer(
        model=model,
        train_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(model),
        args=notebook_arguments(tmp_path / "mlx", **arguments),
    )
    trainer.train()
    theirs = [entry["loss"] for entry in st_trainer.state.log_history if "loss" in entry]
    ours = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(ours) == len(theirs) == 4
    assert np.allclose(ours, theirs, atol=1e-3), (ours, theirs)


def test_thirty_lora_steps_follow_sentence_transformers_trainer(folders: dict, tmp_path) -> None:
    """The same LoRA start on both sides (our adapters, saved in PEFT's layout and loaded by ST), one batch holding
    every row: thirty steps' losses agree within 1e-3."""
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses

    rows = pair_rows(8)
    arguments = dict(per_device_train_batch_size=8, max_steps=30, learning_rate=1e-3, batch_sampler="batch_sampler")
    model = FastSentenceTransformer.from_pretrained(str(folders["bert"]))
    model = FastSentenceTransformer.get_peft_model(model, r=4, target_modules=NOTEBOOK_TARGETS["bert"], lora_alpha=8)
    model.save_pretrained(str(tmp_path / "start"))
    st = reference(tmp_path / "start")
    for name, parameter in st.named_parameters():
        parameter.requires_grad = "lora_" in name
    st_trainer = SentenceTransformerTrainer(
        model=st,
        train_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(st),
        args=notebook_arguments(tmp_path / "st", use_cpu=True, **arguments),
    )
    train_on_one_thread(st_trainer)
    trainer = SentenceTransformerTrainer(
        model=model,
        train_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(model),
        args=notebook_arguments(tmp_path / "mlx", **arguments),
    )
    trainer.train()
    theirs = [entry["loss"] for entry in st_trainer.state.log_history if "loss" in entry]
    ours = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(ours) == len(theirs) == 30
    assert ours[-1] < ours[0] - 0.05
    assert np.allclose(ours, theirs, atol=1e-3), np.abs(np.array(ours) - np.array(theirs)).max()


def _reference_step_losses(model, rows, groups, max_grad_norm: float, learning_rate: float, multiple) -> list:
    """Each step's loss from a loop written here, uncompiled: MNRL (cosine x 20, every in-batch positive a negative)
    averaged over the step's micro-batches, gradients averaged, clipped to the global norm, then AdamW; batches
    padded to a multiple of `multiple` tokens when given."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optimizers
    from mlx.utils import tree_flatten, tree_map

    def mnrl(model, anchors, positives):
        a, p = model(*anchors), model(*positives)
        a = a / mx.linalg.norm(a, axis=-1, keepdims=True)
        p = p / mx.linalg.norm(p, axis=-1, keepdims=True)
        return nn.losses.cross_entropy(20.0 * (a @ p.T), mx.arange(a.shape[0]), reduction="mean")

    loss_and_grad = nn.value_and_grad(model, mnrl)
    optimizer = optimizers.AdamW(learning_rate=learning_rate, weight_decay=0.0, bias_correction=True)
    losses = []
    for group in groups:
        total, summed = 0.0, None
        for indices in group:
            anchors, positives = (
                model.token_batch(model.token_rows([rows[column][int(i)] for i in indices]), "", multiple)
                for column in ("anchor", "positive")
            )
            loss, grads = loss_and_grad(model, anchors, positives)
            total, summed = total + loss, grads if summed is None else tree_map(mx.add, summed, grads)
        count = len(group)
        grads = tree_map(lambda gradient, count=count: gradient / count, summed)
        norm = mx.sqrt(sum((gradient**2).sum() for _, gradient in tree_flatten(grads)))
        scale = mx.minimum(1.0, max_grad_norm / (norm + 1e-6))
        grads = tree_map(lambda gradient, scale=scale: gradient * scale, grads)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state)
        losses.append((total / len(group)).item())
    return losses


@pytest.mark.parametrize("compiled", [False, True])
def test_accumulated_clipped_steps_equal_a_plain_loop(folders: dict, tmp_path, compiled: bool) -> None:
    """The trainer's step (micro-batches summed, averaged, clipped, updated in one call; `mx.compile`d or not) gives
    each step's loss of an uncompiled loop written in the test within 1e-6, over two epochs whose last step is a
    short one. Compiled, batches are padded to a multiple of 32 tokens (one trace per width bucket)."""
    from mlx.utils import tree_flatten
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer import losses

    def lora_model():
        model = FastSentenceTransformer.from_pretrained(str(folders["qwen3"]))
        return FastSentenceTransformer.get_peft_model(
            model, r=4, target_modules=NOTEBOOK_TARGETS["qwen3"], lora_alpha=8, random_state=7
        )

    rows = pair_rows(10)
    model, plain = lora_model(), lora_model()
    start = dict(tree_flatten(plain.trainable_parameters()))
    assert all(np.array_equal(value, start[name]) for name, value in tree_flatten(model.trainable_parameters()))
    # Five micro-batches of 2 an epoch, 2 to a step: steps of 2, 2 and 1; a norm of 0.05 clips most steps.
    arguments = dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        max_grad_norm=0.05,
        learning_rate=5e-3,
        lr_scheduler_type="constant",
        batch_sampler="batch_sampler",
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        train_dataset=rows,
        loss=losses.MultipleNegativesRankingLoss(model),
        args=notebook_arguments(tmp_path, **arguments),
    )
    trainer.args.mx_compile = compiled  # on CPU the default is uncompiled, on a GPU compiled
    trainer.train()
    ours = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    norms = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    batches = [trainer._epoch_batches(epoch) for epoch in range(2)]
    groups = [epoch[start : start + 2] for epoch in batches for start in range(0, len(epoch), 2)]
    plain_losses = _reference_step_losses(plain, rows, groups, 0.05, 5e-3, 32 if compiled else None)
    assert len(ours) == len(plain_losses) == 6 and sum(norm > 0.05 for norm in norms) >= 4
    assert np.allclose(ours, plain_losses, rtol=0, atol=1e-6), np.abs(np.array(ours) - plain_losses).max()
    assert trainer.state.log_history[-1]["train_tokens_per_second"] > 0
