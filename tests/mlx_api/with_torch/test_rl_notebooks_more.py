"""The RL notebooks beyond the scripted four, cell by cell (examples/notebooks/, run by tools/run_cells.py) on tiny
models of their own families under their Hub ids: the Llama 3.1 (8B), Qwen2.5 (3B) and Phi-4 (14B) GRPO notebooks
and gpt-oss (20B)'s 2048-game RL notebook with its sandbox helpers and Minesweeper notebook with its training
callback. Every cell runs, training included."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "examples" / "notebooks"
CELL_COUNTS = {
    "llama3_1_grpo": 10,
    "qwen2_5_grpo": 10,
    "phi4_grpo": 11,
    "gpt_oss_2048_rl": 32,
    "gpt_oss_minesweeper_rl": 15,
}
# What each notebook's own output shows when its cells did their work, not merely ran.
EVIDENCE = {
    "llama3_1_grpo": ["rewards/correctness_reward_func/mean", "rewards/xmlcount_reward_func/mean", "Extracted:"],
    "qwen2_5_grpo": ["rewards/correctness_reward_func/mean", "rewards/int_reward_func/mean", "Extracted:"],
    "phi4_grpo": ["rewards/correctness_reward_func/mean", "rewards/strict_format_reward_func/mean", "Extracted:"],
    "gpt_oss_2048_rl": [
        "rewards/strategy_succeeds/mean",
        "rewards/no_cheating/mean",
        "Timed out with error = execute_strategy ran past its time limit of 2 s",
        "Only Python imports? True",
        "Only Python imports? False",
        "name 'np' is not defined",
        "<|start|>system<|message|>Reasoning: low<|end|>",
    ],
    # The callback got the model and tokenizer at each step end and played with model.generate.
    "gpt_oss_minesweeper_rl": ["[Eval @ step 1] Win rate: 0/1", "[Eval @ step 2]", "rewards/gameplay_reward/mean"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_of_the_notebook_runs(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    output = result.stdout + result.stderr
    missing = [text for text in EVIDENCE[name] if text not in output]
    assert not missing, missing
    if name.endswith("_grpo"):
        assert (tmp_path / "grpo_saved_lora" / "adapter_model.safetensors").is_file()
    if name == "gpt_oss_minesweeper_rl":
        assert (tmp_path / "gpt_oss_lora" / "adapter_config.json").is_file()
