"""Data-parallel training over two ranks started here with `MLX_RANK` / `MLX_HOSTFILE` (the ring backend, over TCP).

Two ranks with 2 rows each must take the step one process takes with 4: same weights, same logged losses,
the same on both ranks. A rank that fails stops the other within a bounded time, naming it.
`mlx.launch` is not used, since its exit status cannot be trusted; each run gets its own free ports and a timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tools import mlx_test_blas

WORKER = Path(__file__).with_name("distributed_worker.py")
# Rows of varied lengths, 9 of them: the last global batch of 4 leaves rank 1 without a row.
ROWS = [[(11 * row + 7 * position) % 500 + 2 for position in range(3 + (row * 5) % 23)] for row in range(9)]
SGD = {"optim": "sgd", "learning_rate": 0.5, "weight_decay": 0.0, "lr_scheduler_type": "constant"}
ADAMW = {"optim": "adamw", "learning_rate": 1e-2, "weight_decay": 0.01, "lr_scheduler_type": "linear"}
RUN_TIMEOUT_S = 240
FAULT_TIMEOUT_S = 60


def free_ports(count: int) -> list:
    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


def launch(tmp_path: Path, model_dir: Path, jobs: list, ranks: int, timeout: float, env=None, wait_for=None) -> list:
    """Run the worker as `ranks` processes (no MLX variables for one); returns (status, output, seconds) per rank.

    Waits for every rank, or only those in `wait_for`, up to `timeout`; a rank still running then is killed
    and reported with status None.
    """
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    plan = tmp_path / f"plan-{ranks}-{jobs[0]['name']}.json"
    plan.write_text(json.dumps({"jobs": jobs, "model_dir": str(model_dir), "results": str(results)}), encoding="utf-8")
    # The reference BLAS (tools/mlx_test_blas.py): the 1e-5 and 1e-6 bounds below are its sums of 2 rows against 4.
    base = {key: value for key, value in mlx_test_blas.reference(os.environ).items() if not key.startswith("MLX_")}
    base.update(env or {})
    procs = []
    if ranks > 1:
        hostfile = tmp_path / f"hostfile-{jobs[0]['name']}.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in free_ports(ranks)]), encoding="utf-8")
        envs = [{**base, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)} for rank in range(ranks)]
    else:
        envs = [base]
    start = time.monotonic()
    for rank_env in envs:
        log = open(tmp_path / f"out-{jobs[0]['name']}-{len(procs)}-{ranks}.txt", "w+")
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, str(WORKER), str(plan)], env=rank_env, stdout=log, stderr=subprocess.STDOUT
                ),
                log,
            )
        )
    awaited = range(ranks) if wait_for is None else wait_for
    finished = {}
    while time.monotonic() - start < timeout and not all(rank in finished for rank in awaited):
        for rank, (proc, _) in enumerate(procs):
            if rank not in finished and proc.poll() is not None:
                finished[rank] = (proc.returncode, time.monotonic() - start)
        time.sleep(0.1)
    outcome = []
    for rank, (proc, log) in enumerate(procs):
        status, seconds = finished.get(rank, (None, time.monotonic() - start))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        outcome.append((status, log.read(), seconds))
        log.close()
    return outcome


def job(name: str, optimizer: dict, batch: int, accumulation: int, tmp_path: Path, **extra) -> dict:
    config = {
        "per_device_train_batch_size": batch,
        "gradient_accumulation_steps": accumulation,
        "num_train_epochs": 1,
        "warmup_steps": 0,
        "max_grad_norm": 1.0,
        "dataset_order": "default",
        "seed": 3,
        "max_seq_length": 64,
        "logging_steps": 1,
        "save_strategy": "no",
        "mx_compile": False,
        **optimizer,
        **extra.pop("config", {}),
    }
    return {"name": name, "config": config, "rows": ROWS, "output_dir": str(tmp_path / name / "rank{rank}"), **extra}


def result(tmp_path: Path, name: str, rank: int) -> tuple:
    folder = tmp_path / "results"
    weights = dict(np.load(folder / f"{name}-rank{rank}.npz"))
    return weights, json.loads((folder / f"{name}-rank{rank}.json").read_text(encoding="utf-8"))


def largest_difference(left: dict, right: dict) -> float:
    assert left.keys() == right.keys()
    return max(float(np.abs(left[name].astype(np.float64) - right[name]).max()) for name in left)


def losses(report: dict) -> list:
    return [entry["loss"] for entry in report["log_history"] if "loss" in entry]


def measured(logs: list) -> list:
    """Logs without the timings, which each rank measures on its own clock."""
    return [
        {key: value for key, value in entry.items() if "runtime" not in key and "per_second" not in key}
        for entry in logs
    ]


def checked(outcome: list) -> None:
    for status, output, _ in outcome:
        assert status == 0, output[-3000:]


CASES = [
    ("sgd-acc1", SGD, 1, 1e-6),
    ("sgd-acc2", SGD, 2, 1e-6),
    ("adamw-acc1", ADAMW, 1, 1e-5),
    ("adamw-acc2", ADAMW, 2, 1e-5),
]


@pytest.fixture(scope="module")
def equivalence_runs(tiny_model_dir, tmp_path_factory):
    """The four settings trained by two ranks (2 rows each) and by one process (4 rows), plus each rank alone."""
    tmp_path = tmp_path_factory.mktemp("equivalence")
    evaluating = {"eval_strategy": "steps", "eval_steps": 2}
    two = [
        job(name, opt, 2, accumulation, tmp_path, eval=True, config=evaluating) for name, opt, accumulation, _ in CASES
    ]
    one = [job(f"{name}-single", opt, 4, accumulation, tmp_path, eval=True) for name, opt, accumulation, _ in CASES]
    # What a naive `mlx.launch` gives: each rank trains every row itself, at its own batch of 2.
    one.append(job("sgd-acc1-whole", SGD, 2, 1, tmp_path))
    checked(launch(tmp_path, tiny_model_dir, two, 2, RUN_TIMEOUT_S))
    checked(launch(tmp_path, tiny_model_dir, one, 1, RUN_TIMEOUT_S))
    return tmp_path


@pytest.mark.parametrize("name, optimizer, accumulation, tolerance", CASES)
def test_two_ranks_take_the_one_process_step(equivalence_runs, name, optimizer, accumulation, tolerance):
    rank0, report0 = result(equivalence_runs, name, 0)
    rank1, report1 = result(equivalence_runs, name, 1)
    single, single_report = result(equivalence_runs, f"{name}-single", 0)
    assert report0["world_size"] == 2 and single_report["world_size"] == 1
    assert all(np.array_equal(rank0[key], rank1[key]) for key in rank0), "the ranks' weights must be bit-identical"
    assert largest_difference(rank0, single) <= tolerance
    assert len(losses(report0)) == len(losses(single_report)) == (3 if accumulation == 1 else 2)
    np.testing.assert_allclose(losses(report0), losses(single_report), rtol=1e-6, atol=0)
    assert losses(report0) == losses(report1)
    for key in ("grad_norm", "eval_loss"):
        ours = [entry[key] for entry in report0["log_history"] if key in entry]
        assert ours == [entry[key] for entry in report1["log_history"] if key in entry]
        assert ours, key
    assert report0["num_input_tokens_seen"] == single_report["num_input_tokens_seen"] == sum(len(row) for row in ROWS)
    assert report1["num_input_tokens_seen"] == report0["num_input_tokens_seen"]


def test_each_rank_training_every_row_is_caught(equivalence_runs):
    """The comparison above can fail: ranks that each train the whole dataset are far from the one-process run."""
    whole, _ = result(equivalence_runs, "sgd-acc1-whole", 0)
    single, _ = result(equivalence_runs, "sgd-acc1-single", 0)
    assert largest_difference(whole, single) > 1e-3


def test_rank_semantics_follow_hugging_face(equivalence_runs):
    _, report0 = result(equivalence_runs, "sgd-acc1", 0)
    _, report1 = result(equivalence_runs, "sgd-acc1", 1)
    assert (report0["is_world_process_zero"], report1["is_world_process_zero"]) == (True, False)
    assert (report0["is_local_process_zero"], report1["is_local_process_zero"]) == (True, False)
    # Callbacks run on every rank, with the rank's own flag in the state.
    assert measured(report0["callback_logs"]) == measured(report1["callback_logs"]) and report0["callback_logs"]
    assert set(report0["world_zero_in_callbacks"]) == {True} and set(report1["world_zero_in_callbacks"]) == {False}
    # Only rank 0 writes the model files; rank 1's output folder stays empty.
    assert (equivalence_runs / "sgd-acc1" / "rank0" / "adapters.safetensors").is_file()
    assert not (equivalence_runs / "sgd-acc1" / "rank1").exists()


def test_resume_at_the_same_world_size_matches_the_uninterrupted_run(tiny_model_dir, tmp_path):
    shared = {"save_strategy": "steps", "save_steps": 1}
    full = job("full", ADAMW, 2, 1, tmp_path, config=shared)
    full["output_dir"] = str(tmp_path / "shared")
    resumed = job("resumed", ADAMW, 2, 1, tmp_path, resume=str(tmp_path / "shared" / "checkpoint-2"))
    checked(launch(tmp_path, tiny_model_dir, [full, resumed], 2, RUN_TIMEOUT_S))
    uninterrupted, full_report = result(tmp_path, "full", 0)
    for rank in (0, 1):
        weights, report = result(tmp_path, "resumed", rank)
        assert all(np.array_equal(weights[key], uninterrupted[key]) for key in weights)
        # Two losses come back with the checkpoint's log history, the third is logged after the resume.
        assert losses(report) == losses(full_report) and len(report["callback_logs"]) == 2
    assert sorted(path.name for path in (tmp_path / "shared").glob("checkpoint-*")) == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
    ]
    # One process may not resume what two ranks saved: the global batches would differ.
    alone = job("alone", ADAMW, 2, 1, tmp_path, resume=str(tmp_path / "shared" / "checkpoint-2"))
    ((status, output, _),) = launch(tmp_path, tiny_model_dir, [alone], 1, RUN_TIMEOUT_S)
    assert status != 0 and "was saved by 2 rank(s) and this run has 1" in output


@pytest.mark.parametrize("fault", ["raise", "sigkill"])
def test_a_failed_rank_stops_the_other_naming_it(tiny_model_dir, tmp_path, fault):
    failing = job(f"fault-{fault}", SGD, 2, 1, tmp_path, fault=fault, fault_ranks=[1])
    (status0, output0, seconds0), (status1, output1, _) = launch(
        tmp_path, tiny_model_dir, [failing], 2, FAULT_TIMEOUT_S
    )
    assert status0 not in (0, None) and seconds0 < FAULT_TIMEOUT_S, output0[-3000:]
    assert status1 not in (0, None)
    if fault == "raise":
        assert "rank 0 stops during step 2 because rank 1 failed: ValueError: injected failure at step 2" in output0
        assert "ValueError: injected failure at step 2" in output1 and "raised on rank 1 during step 2" in output1
    else:
        assert status1 == -9
        assert "RankFailure: rank 0: lost the connection to rank 1 during step 2" in output0


def test_a_rank_that_never_arrives_is_given_up_after_the_timeout(tiny_model_dir, tmp_path):
    hanging = job("fault-hang", SGD, 2, 1, tmp_path, fault="hang", fault_ranks=[1])
    env = {"UNSLOTH_MLX_DISTRIBUTED_TIMEOUT": "5"}
    outcome = launch(tmp_path, tiny_model_dir, [hanging], 2, FAULT_TIMEOUT_S, env, wait_for=[0])
    (status0, output0, seconds0), (status1, _, _) = outcome
    assert status0 == 3 and seconds0 < FAULT_TIMEOUT_S, output0[-3000:]
    assert "[unsloth mlx rank 0] no answer from the other ranks for 5 s during step 2" in output0
    assert status1 is None  # still asleep; the test ended it


def test_a_rank_whose_peer_never_starts_is_given_up_after_the_timeout(tiny_model_dir, tmp_path):
    """Rank 0 listens for rank 1 in `mx.distributed.init`, which has no limit of its own; rank 1 is never started."""
    alone = job("alone-at-init", SGD, 2, 1, tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"jobs": [alone], "model_dir": str(tiny_model_dir), "results": str(tmp_path)}))
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in free_ports(2)]), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    env.update({"MLX_RANK": "0", "MLX_HOSTFILE": str(hostfile), "UNSLOTH_MLX_DISTRIBUTED_TIMEOUT": "3"})
    result = subprocess.run(
        [sys.executable, str(WORKER), str(plan)], env=env, capture_output=True, text=True, timeout=FAULT_TIMEOUT_S
    )
    # faulthandler ends it (status 1) with the stack of the wait, after the line saying what it waits for.
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"[unsloth mlx rank 0] joining the ranks listed in MLX_HOSTFILE={hostfile}" in result.stderr
    assert "Timeout (0:00:03)!" in result.stderr and "in _join_ring" in result.stderr
