"""GRPO under `mlx.launch`: two real ranks (`MLX_RANK` / `MLX_HOSTFILE` on free ports, as `test_distributed_public.py`
starts them) each sample and score their own prompt's group and train one step together.

What is compared: sampling draws from the batch's shape, so one process sampling both prompts at once would draw
other completions. The ranks' reward function records the completions each rank sampled; one process then takes
its optimizer step (`_train_on`, the trainer's step on given completions) on those same completions, with the
advantages of the same rewards. Its LoRA weights must match both ranks' within 1e-5: that holds only if the ranks
averaged their gradients, normalised dapo by every rank's tokens and scaled `"batch"` rewards by the gathered std.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .test_distributed_public import _ports

PROMPTS = ["Bees make", "The sky is"]

COMMON = """
import json, sys
import numpy as np
from mlx.utils import tree_flatten
from unsloth import FastLanguageModel
from trl import GRPOConfig, GRPOTrainer
model_dir, out, loss_type, scale, results = sys.argv[1:6]
model, tokenizer = FastLanguageModel.from_pretrained(model_dir)
model = FastLanguageModel.get_peft_model(model, r=4, lora_alpha=8)
from vllm import SamplingParams
# A third of the vocabulary ends a completion, so the ranks' completions hold different token counts.
STOPS = SamplingParams(top_k=-1, stop_token_ids=list(range(0, tokenizer.vocab_size, 3)))
# TRL's generation_batch_size counts every rank's completions: 2 ranks x 2, or one process x 4.
def config(batch):
    return GRPOConfig(output_dir=out, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                      generation_batch_size=4,
                      num_generations=2, max_steps=1, max_completion_length=6, vllm_sampling_params=STOPS,
                      learning_rate=1.0, warmup_steps=0, lr_scheduler_type="constant", optim="sgd",
                      max_grad_norm=0.0, loss_type=loss_type, scale_rewards=scale, logging_steps=1,
                      report_to="none", seed=7)
def save_weights(path):
    np.savez(path, **{key: np.array(value) for key, value in tree_flatten(model.trainable_parameters())})
"""

RANK_SCRIPT = (
    COMMON
    + """
from unsloth_zoo.mlx.distributed import current_world
rank = current_world().rank
seen = []
def position_reward(prompts, completion_ids, **kwargs):
    seen.append({"prompts": prompts, "completion_ids": completion_ids})
    return [float(index) for index in range(len(completion_ids))]
trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config(2), reward_funcs=[position_reward],
                      train_dataset=[{"prompt": text} for text in json.loads(sys.argv[6])])
trainer.train()
save_weights(f"{results}/rank{rank}.npz")
logged = [entry for entry in trainer.state.log_history if "reward" in entry]
with open(f"{results}/rank{rank}.json", "w") as handle:
    json.dump({"seen": seen, "logged": logged,
               "generation": [trainer.args.generation_batch_size, trainer.args.steps_per_generation]}, handle)
"""
)

REFERENCE_SCRIPT = (
    COMMON
    + """
from unsloth.mlx.rl.grpo.loss import group_advantages
ranks = [json.load(open(f"{results}/rank{rank}.json"))["seen"][0] for rank in range(2)]
prompts = [prompt for seen in ranks for prompt in seen["prompts"]]
completions = [ids for seen in ranks for ids in seen["completion_ids"]]
trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config(4),
                      reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                      train_dataset=[{"prompt": text} for text in json.loads(sys.argv[6])])
rewards = np.array([[float(index)] for seen in ranks for index in range(len(seen["completion_ids"]))])
scores = group_advantages(rewards, [1.0], 2, trainer.args.scale_rewards, ["position_reward"])
save_weights(f"{results}/initial.npz")
trainer._create_optimizer(1)
trainer._train_on([trainer.prompt_ids(text) for text in prompts], completions,
                  [[1] * len(ids) for ids in completions], scores.advantages, {})
save_weights(f"{results}/single.npz")
"""
)


def _start(script: str, args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(procs: list) -> list:
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            outputs.append(stdout)
    finally:
        for proc in procs:  # a rank still running when another failed or timed out is reaped, not left waiting
            proc.kill()
            proc.wait()
    return outputs


@pytest.mark.parametrize(("loss_type", "scale"), [("dapo", "group"), ("grpo", "batch")])
def test_two_ranks_take_the_one_process_step_on_the_same_completions(
    tiny_model_dir: Path, tmp_path: Path, loss_type: str, scale: str
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _ports(2)]), encoding="utf-8")
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    base["UNSLOTH_MLX"] = "1"
    args = [str(tiny_model_dir), str(tmp_path / "out"), loss_type, scale, str(results), json.dumps(PROMPTS)]
    rank_envs = [{**base, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)} for rank in range(2)]
    printed = _finish([_start(RANK_SCRIPT, args, env) for env in rank_envs])
    reference_args = [*args[:1], str(tmp_path / "single"), *args[2:]]
    _finish([_start(REFERENCE_SCRIPT, reference_args, base)])

    records = [json.loads((results / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [record["generation"] for record in records] == [[4, 1], [4, 1]]
    # Whole groups stay on one rank: each rank sampled its own prompt's two completions.
    assert [record["seen"][0]["prompts"] for record in records] == [[PROMPTS[0]] * 2, [PROMPTS[1]] * 2]
    lengths = [sum(len(ids) for ids in record["seen"][0]["completion_ids"]) for record in records]
    assert lengths[0] != lengths[1], lengths  # dapo's normaliser must count both ranks' tokens to match
    names = ("rank0", "rank1", "single", "initial")
    rank0, rank1, single, initial = (dict(np.load(results / f"{name}.npz")) for name in names)
    assert all(np.array_equal(rank0[key], rank1[key]) for key in rank0)
    assert max(float(np.abs(rank0[key] - single[key]).max()) for key in rank0) <= 1e-5
    # The step moved the adapters far more than the tolerance, so the match is not two untouched copies.
    assert max(float(np.abs(single[key] - initial[key]).max()) for key in single) > 1e-3
    # The logged metrics are the ranks' means, the same on both ranks; only rank 0 prints and writes.
    logged = [record["logged"][0] for record in records]
    assert logged[0]["reward"] == pytest.approx(0.5) and logged[0]["loss"] == pytest.approx(logged[1]["loss"])
    assert logged[0]["completions/mean_length"] == pytest.approx(logged[1]["completions/mean_length"])
    assert "'loss'" in printed[0] and "'loss'" not in printed[1]
    assert (tmp_path / "out").is_dir()
