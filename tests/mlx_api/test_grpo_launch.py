"""GRPO under `mlx.launch` is refused by name on every rank: sampling and training run in one process, and two
ranks each training alone would silently write two different adapters. The ranks are real processes joined with
`MLX_RANK` / `MLX_HOSTFILE` on free ports, as `test_distributed_public.py` starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .test_distributed_public import _ports

RANK_SCRIPT = """
import sys
from unsloth import FastLanguageModel
from trl import GRPOConfig, GRPOTrainer
model, tokenizer = FastLanguageModel.from_pretrained(sys.argv[1])
model = FastLanguageModel.get_peft_model(model, r=4, lora_alpha=8)
args = GRPOConfig(output_dir=sys.argv[2], per_device_train_batch_size=2, num_generations=2, max_steps=1,
                  report_to="none")
try:
    GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=[{"prompt": "Bees"}],
                reward_funcs=[lambda completions, **kw: [0.0] * len(completions)])
except NotImplementedError as error:
    print("REFUSED:", error)
"""


def test_two_ranks_are_each_refused_by_name(tiny_model_dir: Path, tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _ports(2)]), encoding="utf-8")
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, str(tiny_model_dir), str(tmp_path / f"out{rank}")],
            env={**base, "UNSLOTH_MLX": "1", "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            outputs.append(stdout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for stdout in outputs:
        assert "REFUSED: GRPOTrainer under mlx.launch (2 ranks)" in stdout, stdout
    assert not (tmp_path / "out0").exists() and not (tmp_path / "out1").exists()
