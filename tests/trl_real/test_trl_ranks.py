"""Real launches of 2 ranks on one host (gloo, CPU): each builds a real TRL trainer through unsloth.

TRL prepares data inside accelerate's main-first block: the local main rank maps alone, so it must get the
pools a single process gets; the other rank must load its cache (same fingerprints, nothing recomputed) even
when it sees less free memory. Each launch runs `rank_worker.py` under a timeout and reads back one JSON per rank.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.kits.fake_host import POLICY_ENV_VARS

from .test_trl_trainers import paired_rows, sft_rows

pytest.importorskip("trl")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")]

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("rank_worker.py")
LAUNCH_TIMEOUT_S = 420
ROWS = 30_000
# What local rank 1 sees free in the fingerprint cases: below one worker's budget, so its config differs.
RANK1_FREE_GIB = 2.0
# Steps whose fingerprint differs by rank whatever num_proc is: trl 1.16's DPO drops fully truncated rows with a
# lambda that captures the trainer's config, and the config holds each rank's own accelerate state.
RANK_SPECIFIC_STEPS = {"SFT": 0, "DPO": 1}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launcher(kind: str) -> list:
    port = str(_free_port())
    if kind == "single":
        return [sys.executable, str(WORKER)]
    if kind == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            port,
            str(WORKER),
        ]
    # accelerate's --cpu starts one process whatever --num_processes says; --multi_gpu starts both, on gloo here.
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        port,
        str(WORKER),
    ]


def launch(kind: str, out: Path, *worker_args: str) -> list:
    """Run the worker under `kind`; the reports of every rank, by rank."""
    out.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if key not in POLICY_ENV_VARS}
    env.update(PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    run = subprocess.run(
        [*_launcher(kind), *worker_args, "--out", str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    reports = [json.loads(path.read_text()) for path in sorted(out.glob("rank-*.json"))]
    assert len(reports) == (1 if kind == "single" else 2), run.stderr[-4000:]
    return reports


@pytest.fixture(scope="module")
def tokenizer_dir(hf_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    hf_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 30,000-row dataset on disk for each trainer; each launch maps its own copy (same fingerprint)."""
    import datasets

    folders = {}
    for trainer, rows in (("SFT", sft_rows), ("DPO", paired_rows)):
        folders[trainer] = tmp_path_factory.mktemp(trainer) / "data"
        datasets.Dataset.from_dict(rows(ROWS)).save_to_disk(folders[trainer])
    return folders


def _copy(saved_folder: Path, to: Path) -> Path:
    shutil.copytree(saved_folder, to)
    return to


def _cache_files(folder: Path) -> list:
    return sorted(path.name for path in folder.glob("cache-*.arrow"))


@pytest.mark.parametrize(
    "trainer, cpus",
    [("SFT", 8), ("DPO", 8), ("SFT", 2)],
)
def test_rank_zero_maps_as_a_single_process_and_rank_one_loads_its_cache(trainer, cpus, saved, tokenizer_dir, tmp_path):
    args = ("--trainer", trainer, "--tokenizer", str(tokenizer_dir), "--cpus", str(cpus))
    alone_data = _copy(saved[trainer], tmp_path / "alone-data")
    ranked_data = _copy(saved[trainer], tmp_path / "ranked-data")
    (alone,) = launch("single", tmp_path / "alone", *args, "--dataset", str(alone_data))
    main, other = launch(
        "torchrun", tmp_path / "ranked", *args, "--dataset", str(ranked_data), "--rank1-free-gib", str(RANK1_FREE_GIB)
    )
    assert main["num_processes"] == other["num_processes"] == 2
    assert alone["pools"], alone  # 30,000 rows repay workers on this host when one process has it
    assert main["pools"] == alone["pools"], (main, alone)
    if cpus == 8:
        assert set(alone["pools"]) == {4}, alone  # the whole host: half of 8 CPUs, not half of 4
    assert other["pools"] == [], other
    # Every step rank 0 mapped with workers, rank 1 loaded from its cache, bar TRL's rank-specific ones.
    assert other["loaded"] == len(main["pools"]) - RANK_SPECIFIC_STEPS[trainer], (main, other)
    if not RANK_SPECIFIC_STEPS[trainer]:
        assert main["fingerprint"] == other["fingerprint"] == alone["fingerprint"]
        # Rank 1 wrote no cache of its own: the folder holds exactly what one process writes.
        assert _cache_files(ranked_data) == _cache_files(alone_data)
    assert 1 not in (main["config_num_proc"], other["config_num_proc"], alone["config_num_proc"])


@pytest.mark.parametrize("trainer, kind", [("SFT", "accelerate"), ("DPO", "torchrun")])
def test_in_memory_rows_stay_in_process_on_every_rank_with_no_1_in_any_config(trainer, kind, tokenizer_dir, tmp_path):
    args = ("--trainer", trainer, "--tokenizer", str(tokenizer_dir), "--cpus", "2", "--dataset", "memory:1000")
    reports = launch(kind, tmp_path / "ranked", *args)
    assert [report["num_processes"] for report in reports] == [2, 2]
    assert [report["pools"] for report in reports] == [[], []]
    assert [report["config_num_proc"] for report in reports] == [None, None]
    if not RANK_SPECIFIC_STEPS[trainer]:
        assert len({report["fingerprint"] for report in reports}) == 1


@pytest.mark.parametrize("name", ["SFTConfig", "DPOConfig", "KTOConfig", "RewardConfig"])
@pytest.mark.parametrize("requested", [None, 1])
def test_a_trl_config_decided_in_process_holds_none_and_a_users_map_builds_no_pool(
    name, requested, monkeypatch, tmp_path
):
    import datasets
    import trl

    from tools.kits.pool_spy import spy_pools

    for key in POLICY_ENV_VARS:
        monkeypatch.delenv(key, raising=False)
    # More ranks than any host has CPUs: auto leaves each no room for workers.
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "100000")
    args = getattr(trl, name)(output_dir=str(tmp_path), report_to="none", use_cpu=True, dataset_num_proc=requested)
    assert args.dataset_num_proc is None
    with spy_pools() as log:
        datasets.Dataset.from_dict({"n": list(range(50))}).map(
            lambda row: {"m": row["n"]}, num_proc=args.dataset_num_proc
        )
    assert log.process_pools() == []
