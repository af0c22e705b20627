"""Issue 48: the all-MiniLM-L6-v2 and EmbeddingGemma notebooks' calls, in their order, cell by cell
(examples/notebooks/, run by tools/run_cells.py), each on a tiny sentence-transformers folder of its family under
its Hub id: every cell runs, the trainer logs its loss and the evaluator its metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

CELL_COUNTS = {"all_minilm_l6_v2": 13, "bert_classification": 12, "embeddinggemma": 11}
PRINTED = {
    "all_minilm_l6_v2": ("'loss'", "Post-Training Results"),
    "bert_classification": ("'loss'", "'eval_accuracy'", "'label': '"),
    "embeddinggemma": ("'loss'", "'eval_loss'", "ndcg@10"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    assert all(text in result.stdout for text in PRINTED[name]), result.stdout[-3000:]
