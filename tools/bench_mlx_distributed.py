"""Data-parallel cost: per step, the all_sum of the LoRA gradients against the whole step, at 1, 2, ... ranks.

Each rank count trains the same tiny LoRA llama with a fixed batch per rank (so N ranks do N times the rows per
step), started here with `MLX_RANK` / `MLX_HOSTFILE` on free local ports. Time runs from the end of the warm-up
steps; the collective's seconds are what `World` measured inside the gradient all_sum (waiting for the slowest
rank included). On a machine with fewer cores than ranks x threads, wall-clock scaling says little; the
communication share is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


class _Clock:
    """Step end times, and a reset of the world's collective seconds once the warm-up steps are done."""

    def __init__(self, world, warmup: int) -> None:
        self.world = world
        self.warmup = warmup
        self.stamps: list = []

    def on_step_end(self, args, state, control, **kwargs):
        self.stamps.append(time.perf_counter())
        if state.global_step == self.warmup:
            self.world.seconds.clear()


def run_rank(plan: dict) -> dict:
    """One rank's training and its timings (the part each launched process runs)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from tools.bench_mlx_inputs import token_rows
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig, apply_lora, load_model
    from unsloth_zoo.mlx.distributed import current_world

    model, tokenizer = load_model(plan["model"])
    mx.random.seed(0)
    apply_lora(model, rank=plan["lora_rank"], alpha=2 * plan["lora_rank"])
    world = current_world()
    steps = plan["steps"] + plan["warmup"]
    rows = token_rows(plan["batch"] * world.size * steps, plan["seq_len"], plan["vocab"], 0)
    args = MLXTrainingConfig(
        per_device_train_batch_size=plan["batch"],
        max_steps=steps,
        warmup_steps=0,
        learning_rate=1e-4,
        save_strategy="no",
        logging_steps=10**6,
        dataset_order="sequential",
        max_seq_length=plan["seq_len"],
        output_dir=plan["output"],
        mx_compile=False,
    )
    trainer = MLXTrainer(model, tokenizer, [{"input_ids": row} for row in rows], args=args)
    clock = _Clock(world, plan["warmup"])
    trainer.add_callback(clock)
    trainer.train()
    timed = clock.stamps[plan["warmup"] - 1 :]
    step_seconds = (timed[-1] - timed[0]) / (len(timed) - 1)
    return {
        "rank": world.rank,
        "ranks": world.size,
        "step_seconds": step_seconds,
        "collective_seconds": {kind: value / plan["steps"] for kind, value in world.seconds.items()},
        "gradient_floats": sum(array.size for _, array in tree_flatten(model.trainable_parameters())),
    }


def _free_ports(count: int) -> list:
    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


def launch(plan: dict, ranks: int, workdir: Path, timeout: float) -> list:
    """Start `ranks` processes of this module on one host and return each rank's report."""
    plan_file = workdir / f"plan-{ranks}.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    envs = [env]
    if ranks > 1:
        hostfile = workdir / f"hostfile-{ranks}.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _free_ports(ranks)]), encoding="utf-8")
        envs = [{**env, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)} for rank in range(ranks)]
    outputs = [workdir / f"report-{ranks}-{rank}.json" for rank in range(ranks)]
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(plan_file)]
    procs = [subprocess.Popen([*command, str(out)], env=rank_env) for rank_env, out in zip(envs, outputs)]
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    failed = [rank for rank, proc in enumerate(procs) if proc.poll() != 0]
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    if failed:
        raise RuntimeError(f"benchmark ranks {failed} of {ranks} failed or ran past {timeout:g} s")
    return [json.loads(out.read_text(encoding="utf-8")) for out in outputs]


def measure_distributed(folder: Path, rank_counts: list, options: argparse.Namespace, workdir: Path) -> list:
    """One row per rank count: step time, gradient all_sum time and its share (the slowest rank's figures)."""
    plan = {
        "model": str(folder),
        "lora_rank": options.rank if options.rank > 0 else 8,
        "batch": options.batch,
        "seq_len": options.seq_len,
        "vocab": options.vocab,
        "steps": options.steps,
        "warmup": max(options.warmup, 1),
        "output": str(workdir / "out"),
    }
    rows = []
    for ranks in rank_counts:
        reports = launch(plan, ranks, workdir, options.distributed_timeout)
        step = max(report["step_seconds"] for report in reports)
        gradients = max(report["collective_seconds"].get("gradients", 0.0) for report in reports)
        others = max(
            sum(value for kind, value in report["collective_seconds"].items() if kind != "gradients")
            for report in reports
        )
        rows.append(
            {
                "ranks": ranks,
                "rows_per_step": options.batch * ranks,
                "gradient_floats": reports[0]["gradient_floats"],
                "step_ms": 1000 * step,
                "gradient_all_sum_ms": 1000 * gradients,
                "other_collectives_ms": 1000 * others,
                "communication_share": (gradients + others) / step if step > 0 else 0.0,
                "rows_per_second": options.batch * ranks / step if step > 0 else 0.0,
            }
        )
    return rows


def format_distributed_table(rows: list) -> str:
    lines = [
        "| ranks | rows/step | LoRA grad floats | step ms | grad all_sum ms "
        "| status + flag collectives ms (incl. waiting for the slowest rank) | communication share | rows/s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['ranks']} | {row['rows_per_step']} | {row['gradient_floats']:,} | {row['step_ms']:.1f} "
            f"| {row['gradient_all_sum_ms']:.2f} | {row['other_collectives_ms']:.2f} "
            f"| {100 * row['communication_share']:.1f}% | {row['rows_per_second']:.1f} |"
        )
    return "\n".join(lines)


def _worker(argv: list) -> int:
    plan = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    Path(argv[1]).write_text(json.dumps(run_rank(plan)), encoding="utf-8")
    return 0


def main(argv: list | None = None) -> int:
    """`--worker PLAN REPORT` runs one rank, as `launch` starts it; the table itself is `bench_mlx.py`'s."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker(argv[1:])
    print("this file runs one rank (--worker PLAN REPORT); for the table run", file=sys.stderr)
    print("`python tools/bench_mlx.py --distributed-ranks 1,2 --steps-only`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
