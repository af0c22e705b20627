"""Four published notebooks' calls, in their order, cell by cell (examples/notebooks/, run by tools/run_cells.py)
on the tiny llama under each notebook's Hub id: every cell runs, the masking-check cells included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import NEUTRAL_CWD, REPO_ROOT

NOTEBOOKS = REPO_ROOT / "examples" / "notebooks"
CELL_COUNTS = {
    "llama3_2_conversational": 21,
    "qwen2_5_alpaca": 15,
    "qwen3": 25,
    "gemma3": 24,
    "zephyr_dpo": 10,
    "llama3_orpo": 15,
}
# What each preference notebook's training logs must show, as printed by the Hugging Face progress callback.
LOGGED_METRICS = {
    "zephyr_dpo": ("'rewards/margins'", "'logps/chosen'"),
    "llama3_orpo": ("'log_odds_ratio'", "'nll_loss'"),
}


def _run(name: str, workdir: Path) -> tuple:
    environment = {**os.environ, "UNSLOTH_MLX": "1", "NOTEBOOK_WORKDIR": str(workdir)}
    command = [sys.executable, str(REPO_ROOT / "tools" / "run_cells.py"), str(NOTEBOOKS / f"{name}.py")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=environment, cwd=NEUTRAL_CWD)
    cells = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"cell"')]
    return result, cells


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs(name: str, tmp_path: Path) -> None:
    result, cells = _run(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    assert all(metric in result.stdout for metric in LOGGED_METRICS.get(name, ())), result.stdout[-3000:]
    if name == "gemma3":
        # A list-of-parts message renders as its text inside the prompt, never as a Python repr.
        assert "Continue the sequence: 1, 1, 2, 3, 5, 8," in result.stdout and "'type': 'text'" not in result.stdout
