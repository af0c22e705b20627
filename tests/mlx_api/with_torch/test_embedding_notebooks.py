"""Issue 48: the seven embedding notebooks' calls, in their order, cell by cell
(examples/notebooks/, run by tools/run_cells.py), each on a tiny sentence-transformers folder of its family under
its Hub id: every cell runs, the trainer logs its loss and the evaluator its metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

CELL_COUNTS = {
    "all_minilm_l6_v2": 15,
    "bert_classification": 12,
    "bge_m3": 15,
    "embeddinggemma": 16,
    "gte_modernbert_base": 15,
    "qwen3_embedding_0_6b": 15,
    "qwen3_embedding_4b": 15,
}
# The replays that run their notebook's `if False:` reload and GGUF cells too (all but the classifier's).
GGUF_WRITTEN = "['unsloth.F16.gguf', 'unsloth.Q8_0.gguf']"
PRINTED = {
    "all_minilm_l6_v2": ("'loss'", "Post-Training Results", GGUF_WRITTEN),
    "bert_classification": ("'loss'", "'eval_accuracy'", "'label': '"),
    "bge_m3": ("'loss'", "Post-Training Results", GGUF_WRITTEN),
    "embeddinggemma": ("'loss'", "'eval_loss'", "ndcg@10", GGUF_WRITTEN),
    "gte_modernbert_base": ("'loss'", "Post-Training Results", GGUF_WRITTEN),
    "qwen3_embedding_0_6b": ("'loss'", "Post-Training Results", GGUF_WRITTEN),
    "qwen3_embedding_4b": ("'loss'", "Post-Training Results", GGUF_WRITTEN),
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
