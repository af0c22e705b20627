"""DPO and ORPO on MLX against TRL's own trainers on CPU torch: same tiny llama, rows, order and arguments.

Both sides fine-tune every weight of the tiny llama read from the same safetensors folder, TRL's reference
being its fresh copy of that folder and ours the first weights. Every step's loss, grad norm and every
metric TRL logs must agree within 1e-5 (relative, for values above 1 in size).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from unsloth import FastLanguageModel

STEPS = 5
TOLERANCE = 1e-5
WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing in green trees near water".split()


def preference_rows() -> list:
    rows = []
    for index in range(6):
        prompt = " ".join(WORDS[index : index + 4 + index])
        chosen = " " + " ".join(WORDS[-(3 + index) :])
        rejected = " " + " ".join(reversed(WORDS[2 : 4 + 2 * index]))
        rows.append({"prompt": f"Question {index}: {prompt}?", "chosen": chosen, "rejected": rejected})
    return rows


def eval_rows() -> list:
    """Five rows, so the second eval batch of three is short and the row weighting of eval_loss counts."""
    return [{**row, "prompt": "Again: " + row["prompt"]} for row in preference_rows()[1:]]


def shared_arguments(output_dir: Path, accumulation: int = 1) -> dict:
    return {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": accumulation,
        "max_steps": STEPS,
        "learning_rate": 3e-4,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": 3407,
        "beta": 0.1,
        "max_length": 128,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "per_device_eval_batch_size": 3,
    }


def trl_history(method: str, model_dir: Path, arguments: dict) -> list:
    import datasets
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    with warnings.catch_warnings():
        # TRL warns that `trl.experimental` (ORPO's home in TRL 1.x) may change.
        warnings.simplefilter("ignore")
        if method == "dpo":
            from trl.trainer.dpo_config import DPOConfig as Config
            from trl.trainer.dpo_trainer import DPOTrainer as Trainer
        else:
            from trl.experimental.orpo.orpo_config import ORPOConfig as Config
            from trl.experimental.orpo.orpo_trainer import ORPOTrainer as Trainer
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    with warnings.catch_warnings():
        # TRL's own configs trip transformers' deprecation warnings (gradient_checkpointing); not ours to fix.
        warnings.simplefilter("ignore", FutureWarning)
        # TRL's configs default to bf16 autocast; the comparison is in float32, as the MLX side trains.
        args = Config(**arguments, report_to="none", disable_tqdm=True, use_cpu=True, bf16=False)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=datasets.Dataset.from_list(preference_rows()),
            eval_dataset=datasets.Dataset.from_list(eval_rows()),
            processing_class=tokenizer,
        )
        trainer.train()
    return trainer.state.log_history


def mlx_history(method: str, model_dir: Path, arguments: dict) -> list:
    import datasets

    from unsloth.mlx.rl.dpo import DPOConfig, DPOTrainer
    from unsloth.mlx.rl.orpo import ORPOConfig, ORPOTrainer

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir), max_seq_length=256)
    config, trainer_class = (DPOConfig, DPOTrainer) if method == "dpo" else (ORPOConfig, ORPOTrainer)
    trainer = trainer_class(
        model=model,
        args=config(**arguments),
        train_dataset=datasets.Dataset.from_list(preference_rows()),
        eval_dataset=datasets.Dataset.from_list(eval_rows()),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.state.log_history


def step_logs(history: list) -> list:
    return [entry for entry in history if "loss" in entry]


def gap(actual: float, expected: float) -> float:
    return abs(actual - expected) / max(1.0, abs(expected))


@pytest.mark.parametrize("accumulation", [1, 3])
@pytest.mark.parametrize("method", ["dpo", "orpo"])
def test_every_logged_value_matches_trl(method: str, accumulation: int, tiny_model_dir: Path, tmp_path: Path) -> None:
    trl_full = trl_history(method, tiny_model_dir, shared_arguments(tmp_path / "trl", accumulation))
    mlx_full = mlx_history(method, tiny_model_dir, shared_arguments(tmp_path / "mlx", accumulation))
    expected, actual = step_logs(trl_full), step_logs(mlx_full)
    assert [entry["step"] for entry in actual] == [entry["step"] for entry in expected] == list(range(1, STEPS + 1))
    compared = set(expected[0]) - {"step", "epoch"}
    assert {"loss", "grad_norm", "rewards/chosen", "rewards/margins", "logps/rejected", "logits/chosen"} <= compared
    worst = {}
    for mine, theirs in zip(actual, expected):
        assert set(mine) == set(theirs)
        for key in compared:
            worst[key] = max(worst.get(key, 0.0), gap(mine[key], theirs[key]))
    print(method, accumulation, {key: f"{value:.2e}" for key, value in sorted(worst.items())})
    assert all(value <= TOLERANCE for value in worst.values()), worst
    expected_eval = [entry for entry in trl_full if "eval_loss" in entry]
    actual_eval = [entry for entry in mlx_full if "eval_loss" in entry]
    assert [entry["step"] for entry in actual_eval] == [entry["step"] for entry in expected_eval] == [2, 4, 5]
    timing = {"eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "step", "epoch"}
    for mine, theirs in zip(actual_eval, expected_eval):
        assert set(mine) == set(theirs)
        eval_gaps = {key: gap(mine[key], theirs[key]) for key in set(theirs) - timing}
        print(method, accumulation, "eval", max(eval_gaps.values()))
        assert max(eval_gaps.values()) <= TOLERANCE, eval_gaps
    # Training moved the policy: the margins TRL logs grow apart from zero after the first step.
    assert abs(actual[-1]["rewards/margins"]) > 1e-3


def test_first_dpo_step_is_ln_2_with_zero_rewards(tiny_model_dir: Path, tmp_path: Path) -> None:
    first = step_logs(mlx_history("dpo", tiny_model_dir, shared_arguments(tmp_path)))[0]
    assert math.isclose(first["loss"], math.log(2), abs_tol=1e-6)
    assert first["rewards/chosen"] == first["rewards/rejected"] == first["rewards/margins"] == 0.0
