"""One rank of a data-parallel test run: trains the tiny model through the jobs in a JSON plan, as a user script would.

Started by `test_mlx_distributed.py` with `MLX_RANK` / `MLX_HOSTFILE` (or neither, for the one-process
reference). Usage: `distributed_worker.py PLAN.json`. Each job writes `<results>/<job>-rank<R>.npz` (the final
trainable weights) and `.json` (log history and what the rank saw). A job's `fault` injects a failure at step 2.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig, apply_lora, load_model


class Fault:
    """Fails this rank as the job says when step 2 begins: an exception, SIGKILL, or never reaching a collective."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step != 1:
            return
        if self.kind == "raise":
            raise ValueError("injected failure at step 2")
        if self.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "hang":
            time.sleep(3600)


class Seen:
    """Records, on this rank, the events a callback receives and the rank flags the state carries."""

    def __init__(self) -> None:
        self.logs: list = []
        self.world_zero: list = []
        self.saves = 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))
        self.world_zero.append(state.is_world_process_zero)

    def on_save(self, args, state, control, **kwargs):
        self.saves += 1


def run_job(job: dict, model_dir: str, results: Path, rank: int) -> None:
    model, tokenizer = load_model(model_dir)
    mx.random.seed(0)
    apply_lora(model, rank=4, alpha=8, dropout=0.0)
    seen = Seen()
    callbacks = [seen] + ([Fault(job["fault"])] if job.get("fault") and rank in job["fault_ranks"] else [])
    output_dir = job["output_dir"].replace("{rank}", str(rank))
    args = MLXTrainingConfig(output_dir=output_dir, **job["config"])
    rows = [{"input_ids": row} for row in job["rows"]]
    trainer = MLXTrainer(model, tokenizer, rows, rows if job.get("eval") else None, args=args, callbacks=callbacks)
    trainer.train(resume_from_checkpoint=job.get("resume"))
    weights = {name: np.array(value) for name, value in tree_flatten(model.trainable_parameters())}
    np.savez(results / f"{job['name']}-rank{rank}.npz", **weights)
    report = {
        "log_history": trainer.state.log_history,
        "callback_logs": seen.logs,
        "world_zero_in_callbacks": seen.world_zero,
        "saves": seen.saves,
        "is_world_process_zero": trainer.is_world_process_zero(),
        "is_local_process_zero": trainer.is_local_process_zero(),
        "num_input_tokens_seen": trainer.state.num_input_tokens_seen,
        "world_size": trainer.world.size,
    }
    (results / f"{job['name']}-rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")


def main(argv: list) -> int:
    plan = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    rank = int(os.environ.get("MLX_RANK", "0"))
    for job in plan["jobs"]:
        run_job(job, plan["model_dir"], Path(plan["results"]), rank)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
