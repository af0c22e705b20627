"""GRPO on the zoo's shared training loop: generation batches reused for `num_iterations` passes and spread over
`steps_per_generation` micro-batches as TRL does, resuming from a checkpoint, rotation, evaluation and callbacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from .test_grpo import CONVERSATIONS, chat_tokenizer, notebook_args


def counting_reward(calls: List[List[List[int]]]) -> Any:
    def length_reward(completions, completion_ids, **kwargs):
        calls.append([list(ids) for ids in completion_ids])
        return [float(sum(ids) % 5) for ids in completion_ids]

    return length_reward


def build(load_public: Any, tmp_path: Path, rewards: List[Any], **overrides: Any) -> Any:
    from trl import GRPOTrainer

    model, tokenizer = load_public(lora=True)
    eval_dataset = overrides.pop("eval_dataset", None)
    callbacks = overrides.pop("callbacks", None)
    return GRPOTrainer(
        model=model,
        processing_class=chat_tokenizer(tokenizer),
        reward_funcs=rewards,
        args=notebook_args(tmp_path, **overrides),
        train_dataset=CONVERSATIONS,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
    )


def adapters(trainer: Any) -> Dict[str, np.ndarray]:
    from mlx.utils import tree_flatten

    return {name: np.array(value) for name, value in tree_flatten(trainer.model.trainable_parameters())}


def train_logs(trainer: Any) -> List[Dict[str, float]]:
    return [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]


def test_num_iterations_reuses_each_generation_batch_for_that_many_steps(load_public, tmp_path: Path) -> None:
    calls: List[List[List[int]]] = []
    trainer = build(load_public, tmp_path, [counting_reward(calls)], num_iterations=2, max_steps=4)
    trainer.train()
    assert len(calls) == 2 and all(len(call) == 4 for call in calls)
    logs = train_logs(trainer)
    assert [entry["step"] for entry in logs] == [1, 2, 3, 4]
    # Rewards are logged at the step that sampled them, as TRL logs them when it generates.
    assert ["reward" in entry for entry in logs] == [True, False, True, False]
    assert all(np.isfinite(entry["loss"]) and "entropy" in entry for entry in logs)


def test_a_reused_generation_batch_takes_its_ratio_against_the_sampling_policy(load_public, tmp_path) -> None:
    # Unseeded sampling at a constant rate from step 1, so the group's completions differ and the first step moves.
    schedule = {"warmup_ratio": 0.0, "warmup_steps": 0, "lr_scheduler_type": "constant", "learning_rate": 0.01}
    rewards = [counting_reward([])]
    trainer = build(
        load_public, tmp_path, rewards, num_iterations=2, max_steps=2, vllm_sampling_params=None, **schedule
    )
    trainer.train()
    first, second = train_logs(trainer)
    # The first pass is on-policy (ratio 1); after the first step the second pass's ratios leave the clip range.
    assert first["clip_ratio/region_mean"] == 0.0
    assert second["clip_ratio/region_mean"] > 0.0


def test_steps_per_generation_spreads_one_generation_batch_over_several_steps(load_public, tmp_path: Path) -> None:
    calls: List[List[List[int]]] = []
    trainer = build(load_public, tmp_path, [counting_reward(calls)], steps_per_generation=2, max_steps=2)
    assert trainer.args.generation_batch_size == 8
    trainer.train()
    # Both prompts' groups are sampled at once, then trained on in two optimizer steps of four completions.
    assert len(calls) == 1 and len(calls[0]) == 8
    assert trainer.state.global_step == 2


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        (
            {"steps_per_generation": 3, "gradient_accumulation_steps": 2},
            NotImplementedError,
            r"steps_per_generation=3 x num_iterations=1 micro-batches .* gradient_accumulation_steps=2",
        ),
        ({"num_iterations": 0}, ValueError, r"num_iterations must be a positive integer"),
    ],
)
def test_generation_schedules_the_loop_cannot_step_are_refused(tmp_path: Path, overrides, error, message) -> None:
    with pytest.raises(error, match=message):
        notebook_args(tmp_path, **overrides)


def test_resuming_from_a_checkpoint_takes_the_steps_the_uninterrupted_run_took(load_public, tmp_path: Path) -> None:
    rewards = [counting_reward([])]
    straight = build(load_public, tmp_path / "straight", rewards, max_steps=3, save_steps=1, save_total_limit=2)
    straight.train()
    saved = sorted(path.name for path in (tmp_path / "straight" / "outputs").glob("checkpoint-*"))
    assert saved == ["checkpoint-2", "checkpoint-3"]

    first = build(load_public, tmp_path / "resumed", rewards, max_steps=2, save_steps=1)
    first.train()
    resumed = build(load_public, tmp_path / "resumed", rewards, max_steps=3, save_steps=1)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3
    assert [entry["step"] for entry in train_logs(resumed)] == [1, 2, 3]
    expected, actual = adapters(straight), adapters(resumed)
    assert any(not np.allclose(adapters(first)[name], expected[name]) for name in expected)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=0, atol=1e-6, err_msg=name)


def test_eval_dataset_logs_trls_eval_metrics_through_the_callbacks(load_public, tmp_path: Path) -> None:
    from transformers import TrainerCallback

    events: List[str] = []

    class Recorder(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            events.append("evaluate")
            assert "eval_reward" in metrics

        def on_step_end(self, args, state, control, **kwargs):
            events.append("step")

    trainer = build(
        load_public,
        tmp_path,
        [counting_reward([])],
        max_steps=2,
        eval_dataset=CONVERSATIONS,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=4,
        callbacks=[Recorder()],
    )
    trainer.train()
    assert events == ["step", "evaluate", "step", "evaluate"]
    evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert len(evaluations) == 2
    for name in ("eval_reward", "eval_reward_std", "eval_rewards/length_reward/mean", "eval_completions/mean_length"):
        assert name in evaluations[0], name
    assert np.isfinite(evaluations[0]["eval_loss"])
    direct = trainer.evaluate()
    assert set(direct) >= {"eval_loss", "eval_reward", "eval_entropy"}
