"""Four published notebooks' calls, in their order, cell by cell (examples/notebooks/, run by tools/run_cells.py)
on the tiny llama under each notebook's Hub id: every cell runs, the masking-check cells included."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import REPO_ROOT

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


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    assert all(metric in result.stdout for metric in LOGGED_METRICS.get(name, ())), result.stdout[-3000:]
    if name == "gemma3":
        # A list-of-parts message renders as its text inside the prompt, never as a Python repr.
        assert "Continue the sequence: 1, 1, 2, 3, 5, 8," in result.stdout and "'type': 'text'" not in result.stdout
