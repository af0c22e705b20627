"""GRPO's `eval_dataset` under `mlx.launch`: two real ranks share three eval prompts (uneven shares), and both log
the same `eval_*` metrics, each the mean over every chunk either rank evaluated, as a one-process evaluation
averages its chunks. The reward function is each completion's length and records the completions a rank scored,
so the expected means come from what the ranks sampled; a short collective timeout turns a hang into a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from .test_distributed_public import _ports
from .test_grpo_launch import COMMON, PROMPTS, _finish, _start

EVAL_PROMPTS = ["Evaluate this", "Once upon a time", "Rivers flow"]

EVAL_SCRIPT = (
    COMMON
    + """
from unsloth_zoo.mlx.distributed import current_world
rank = current_world().rank
eval_prompts, failing = json.loads(sys.argv[7]), sys.argv[8]
scored = []
def length_reward(prompts, completion_ids, **kwargs):
    if prompts[0] == failing:
        raise ValueError(f"no score for {failing!r}")
    if prompts[0] in eval_prompts:
        scored.append({"prompts": prompts, "lengths": [len(ids) for ids in completion_ids]})
    return [float(len(ids)) for ids in completion_ids]
args = GRPOConfig(output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=1,
                  generation_batch_size=4, num_generations=2, max_steps=1, max_completion_length=6,
                  vllm_sampling_params=STOPS, learning_rate=1e-3, optim="sgd", loss_type=loss_type,
                  scale_rewards=scale, logging_steps=1, eval_strategy="steps", eval_steps=1,
                  per_device_eval_batch_size=2, report_to="none", seed=7)
trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, reward_funcs=[length_reward],
                      train_dataset=[{"prompt": text} for text in json.loads(sys.argv[6])],
                      eval_dataset=[{"prompt": text} for text in eval_prompts])
trainer.train()
logged = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
with open(f"{results}/rank{rank}.json", "w") as handle:
    json.dump({"scored": scored, "logged": logged}, handle)
"""
)


def _launch(model_dir: Path, tmp_path: Path, eval_prompts: list = EVAL_PROMPTS, failing: str = "") -> list:
    """Both ranks started on the script; `failing` names an eval prompt whose reward raises."""
    results = tmp_path / "results"
    results.mkdir()
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _ports(2)]), encoding="utf-8")
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    # A rank left waiting on a collective its peer never reaches stops after this many seconds instead of hanging.
    base.update(UNSLOTH_MLX="1", UNSLOTH_MLX_DISTRIBUTED_TIMEOUT="60")
    args = [str(model_dir), str(tmp_path / "out"), "grpo", "group", str(results), json.dumps(PROMPTS)]
    args += [json.dumps(eval_prompts), failing]
    envs = [{**base, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)} for rank in range(2)]
    return [_start(EVAL_SCRIPT, args, env) for env in envs]


def test_two_ranks_log_the_mean_over_every_ranks_eval_chunks(tiny_model_dir: Path, tmp_path: Path) -> None:
    printed = _finish(_launch(tiny_model_dir, tmp_path))
    results = tmp_path / "results"
    records = [json.loads((results / f"rank{rank}.json").read_text()) for rank in range(2)]
    # Strided shares of the three one-prompt chunks: rank 0 scores the first and third, rank 1 the second,
    # each chunk a whole group of num_generations completions.
    chunks = [[call["prompts"] for call in record["scored"]] for record in records]
    assert chunks == [[[EVAL_PROMPTS[0]] * 2, [EVAL_PROMPTS[2]] * 2], [[EVAL_PROMPTS[1]] * 2]]
    logged = [record["logged"] for record in records]
    assert len(logged[0]) == 1 and logged[0] == logged[1]
    lengths = [[float(np.mean(call["lengths"])) for call in record["scored"]] for record in records]
    over_chunks = float(np.mean(lengths[0] + lengths[1]))
    assert logged[0][0]["eval_reward"] == pytest.approx(over_chunks, rel=1e-6)
    assert logged[0][0]["eval_completions/mean_length"] == pytest.approx(over_chunks, rel=1e-6)
    # The chunks' lengths differ, so the mean of the two ranks' means would not pass for the mean over chunks.
    assert over_chunks != pytest.approx(float(np.mean([np.mean(lengths[0]), np.mean(lengths[1])])), rel=1e-6)
    assert np.isfinite(logged[0][0]["eval_loss"])
    assert "'eval_loss'" in printed[0] and "'eval_loss'" not in printed[1]


def test_a_rank_without_eval_chunks_logs_the_other_ranks_means(tiny_model_dir: Path, tmp_path: Path) -> None:
    _finish(_launch(tiny_model_dir, tmp_path, eval_prompts=EVAL_PROMPTS[:1]))
    records = [json.loads((tmp_path / "results" / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [[call["prompts"] for call in record["scored"]] for record in records] == [[[EVAL_PROMPTS[0]] * 2], []]
    logged = [record["logged"] for record in records]
    assert len(logged[0]) == 1 and logged[0] == logged[1]
    expected = float(np.mean(records[0]["scored"][0]["lengths"]))
    assert logged[0][0]["eval_completions/mean_length"] == pytest.approx(expected, rel=1e-6)


def test_a_rank_failing_in_evaluation_stops_both_with_its_cause(tiny_model_dir: Path, tmp_path: Path) -> None:
    procs = _launch(tiny_model_dir, tmp_path, failing=EVAL_PROMPTS[1])
    try:
        errors = [proc.communicate(timeout=120)[1] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    # Rank 1 raised its own error; rank 0, which had more chunks to evaluate, raised on hearing of it rather than
    # waiting out the collective timeout (the watchdog's exit status is 3).
    assert [proc.returncode for proc in procs] == [1, 1], errors
    assert "no score for 'Once upon a time'" in errors[1]
    assert "RankFailure" in errors[0] and "rank 1 failed" in errors[0] and "no score" in errors[0]
