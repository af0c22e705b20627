"""A notebook-style script (FastLanguageModel, UnslothTrainer, train_on_responses_only) run as two ranks.

With CUDA Unsloth's batch order and response-only masks, 2 ranks x 2 rows take the step 1 process x 4 takes,
and only rank 0 prints the logs. The ranks are started here with `MLX_RANK` / `MLX_HOSTFILE` on free ports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from .conftest import QUESTIONS, chat_text

WORKER = Path(__file__).with_name("distributed_public_worker.py")
TIMEOUT_S = 300


def _ports(count: int) -> list:
    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


def _run(tmp_path: Path, model_dir: Path, name: str, ranks: int, batch: int, save: bool = False) -> list:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    # 9 rows: the last global batch of 4 leaves rank 1 without a row.
    texts = [chat_text(question, answer) for question, answer in QUESTIONS] + [chat_text("Why?", "Because.")]
    plan = tmp_path / f"{name}.json"
    plan.write_text(
        json.dumps(
            {
                "name": name,
                "model_dir": str(model_dir),
                "batch": batch,
                "texts": texts,
                "results": str(results),
                "output_dir": str(tmp_path / name / "rank{rank}"),
                "save_dir": str(tmp_path / f"{name}-saves" / "rank{rank}") if save else "",
            }
        ),
        encoding="utf-8",
    )
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    base["UNSLOTH_MLX"] = "1"
    envs = [base]
    if ranks > 1:
        hostfile = tmp_path / f"{name}-hostfile.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _ports(ranks)]), encoding="utf-8")
        envs = [{**base, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)} for rank in range(ranks)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(plan)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for env in envs
    ]
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
            assert proc.returncode == 0, stderr[-3000:]
            outputs.append(stdout)
    finally:
        for proc in procs:  # a rank still running when another failed or timed out is reaped, not left waiting
            proc.kill()
            proc.wait()
    return outputs


def _weights(tmp_path: Path, name: str, rank: int) -> dict:
    return dict(np.load(tmp_path / "results" / f"{name}-rank{rank}.npz"))


def test_a_notebook_script_trains_as_two_ranks_with_the_one_process_step(tiny_model_dir, tmp_path) -> None:
    two = _run(tmp_path, tiny_model_dir, "two", 2, 2, save=True)
    _run(tmp_path, tiny_model_dir, "one", 1, 4)
    rank0, rank1, single = _weights(tmp_path, "two", 0), _weights(tmp_path, "two", 1), _weights(tmp_path, "one", 0)
    assert all(np.array_equal(rank0[key], rank1[key]) for key in rank0)
    assert max(float(np.abs(rank0[key].astype(np.float64) - single[key]).max()) for key in rank0) <= 1e-6
    losses = [json.loads((tmp_path / "results" / f"{name}.json").read_text()) for name in ("two-rank0", "one-rank0")]
    assert len(losses[0]) == 2
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6, atol=0)
    # transformers' printer prints on world process zero only, as under torchrun.
    assert "'loss'" in two[0] and "'loss'" not in two[1]
    assert (tmp_path / "two" / "rank0").is_dir() and not (tmp_path / "two" / "rank1").exists()
    # The save cells ran on both ranks; only rank 0 wrote, and rank 1 waited for it (HF's main-process rule).
    saves = tmp_path / "two-saves"
    assert (saves / "rank0" / "lora_model" / "adapter_config.json").is_file()
    assert (saves / "rank0" / "lora_model" / "tokenizer.json").is_file()
    assert (saves / "rank0" / "merged" / "model.safetensors").is_file()
    assert not (saves / "rank1").exists()
