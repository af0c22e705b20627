"""The MLX trainer against Hugging Face's `Trainer` on CPU torch: same weights, rows, order and arguments.

Both sides fine-tune every weight of the tiny llama, read from the same safetensors (transformers'
`LlamaForCausalLM` loads the folder as it is), on token rows of 5 to 90 tokens in CUDA Unsloth's batch order,
with the same arguments (`TrainingArguments` and `UnslothTrainingArguments`). Full fine-tuning is the exact
comparison: there is no adapter initialisation to reproduce, and weight decay is 0 because the Trainer spares
norm weights from decay while the MLX optimizer decays every trained weight (LoRA trains no norms, so the two
agree there at any decay).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from unsloth import FastLanguageModel, UnslothTrainer

TRAIN_ROWS = 40
EVAL_ROWS = 8
STEPS = 12
TRAINING_KEYS = {"loss", "grad_norm", "learning_rate", "epoch", "step"}


def token_rows(count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 512, size=int(length)).tolist() for length in rng.integers(5, 91, size=count)]


def shared_arguments(output_dir: Path, accumulation: int) -> dict:
    """The arguments both trainers get, by the names both take."""
    return {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": accumulation,
        "max_steps": STEPS,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "linear",
        "warmup_steps": 2,
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "logging_steps": 1,
        "eval_strategy": "steps",
        "eval_steps": 6,
        "per_device_eval_batch_size": 3,
        "save_strategy": "no",
        "seed": 3407,
    }


def train_with_transformers(model_dir: Path, args, train_rows: list, eval_rows: list) -> list:
    import datasets
    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, LlamaForCausalLM, Trainer

    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"input_ids": train_rows}),
        eval_dataset=datasets.Dataset.from_dict({"input_ids": eval_rows}),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    trainer.train()
    return trainer.state.log_history


def train_with_mlx(model_dir: Path, args, train_rows: list, eval_rows: list) -> list:
    import datasets

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir), max_seq_length=128)
    trainer = UnslothTrainer(
        model=model,
        tokenizer=tokenizer,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"input_ids": train_rows}),
        eval_dataset=datasets.Dataset.from_dict({"input_ids": eval_rows}),
    )
    trainer.train()
    return trainer.state.log_history


def relative_gap(actual: float, expected: float) -> float:
    return abs(actual - expected) / abs(expected)


@pytest.fixture(scope="module")
def row_sets() -> tuple:
    return token_rows(TRAIN_ROWS, seed=14), token_rows(EVAL_ROWS, seed=41)


@pytest.mark.parametrize("accumulation", [1, 2, 4])
def test_losses_grad_norms_rates_and_eval_loss_match_the_trainer(tiny_model_dir, tmp_path, row_sets, accumulation):
    train_rows, eval_rows = row_sets
    assert min(map(len, train_rows)) <= 10 and max(map(len, train_rows)) >= 80  # really ragged rows
    from transformers import TrainingArguments

    from unsloth import UnslothTrainingArguments

    hf_args = TrainingArguments(
        **shared_arguments(tmp_path / "hf", accumulation), report_to="none", disable_tqdm=True, use_cpu=True
    )
    expected = train_with_transformers(tiny_model_dir, hf_args, *row_sets)
    mlx_args = UnslothTrainingArguments(**shared_arguments(tmp_path / "mlx", accumulation))
    actual = train_with_mlx(tiny_model_dir, mlx_args, *row_sets)

    expected_steps = [entry for entry in expected if "loss" in entry]
    actual_steps = [entry for entry in actual if "loss" in entry]
    assert (
        [entry["step"] for entry in actual_steps]
        == [entry["step"] for entry in expected_steps]
        == list(range(1, STEPS + 1))
    )
    assert all(set(entry) == TRAINING_KEYS for entry in expected_steps)
    assert all(set(entry) == TRAINING_KEYS for entry in actual_steps)
    gaps = {"loss": [], "grad_norm": []}
    for mine, theirs in zip(actual_steps, expected_steps):
        assert mine["learning_rate"] == theirs["learning_rate"], mine["step"]
        assert mine["epoch"] == pytest.approx(theirs["epoch"], rel=1e-12)
        for key in gaps:
            gaps[key].append(relative_gap(mine[key], theirs[key]))
    largest = ", ".join(f"{key} {max(values):.2e}" for key, values in gaps.items())
    print(f"accumulation {accumulation}: largest relative gap {largest}")
    assert max(gaps["loss"]) < 1e-5 and max(gaps["grad_norm"]) < 1e-5, gaps

    expected_eval = [entry["eval_loss"] for entry in expected if "eval_loss" in entry]
    actual_eval = [entry["eval_loss"] for entry in actual if "eval_loss" in entry]
    assert len(expected_eval) == len(actual_eval) == 2
    eval_gaps = [relative_gap(mine, theirs) for mine, theirs in zip(actual_eval, expected_eval)]
    print(f"accumulation {accumulation}: eval_loss relative gaps {', '.join(f'{gap:.2e}' for gap in eval_gaps)}")
    assert max(eval_gaps) < 1e-5
    # The comparison covers real training: a random model's first loss is near ln(512), and clipping took part.
    assert math.isclose(expected_steps[0]["loss"], math.log(512), rel_tol=0.15)
    assert max(entry["grad_norm"] for entry in expected_steps) > 1.0
