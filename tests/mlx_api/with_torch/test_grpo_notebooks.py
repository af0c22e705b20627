"""The Qwen3 (4B) and Gemma 3 (1B) GRPO notebooks' calls, in their order, cell by cell (examples/notebooks/, run by
tools/run_cells.py) on the tiny llama under each notebook's Hub id: every cell runs, training and the
`fast_generate` / `save_lora` / safetensors / `load_lora` cells included."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "examples" / "notebooks"
CELL_COUNTS = {"qwen3_grpo": 35, "gemma3_grpo": 24}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_grpo_notebook_cell_runs(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    # The GRPO cell trained and logged TRL's reward metrics, and its reward function saw real completions.
    assert "rewards/check_answer/mean" in result.stdout + result.stderr
    assert "Response:" in result.stdout
    if name == "qwen3_grpo":
        assert (tmp_path / "grpo_saved_lora" / "adapter_model.safetensors").is_file()
