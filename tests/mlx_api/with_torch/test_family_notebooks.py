"""More published notebooks' calls, in their order, cell by cell (examples/notebooks/, run by tools/run_cells.py),
each on a tiny model of the notebook's own mlx-lm family under its Hub id (examples/notebooks/_families.py):
continued pretraining, text completion, reasoning (Magistral), Ollama, gpt-oss, LFM2, Granite 4.0, Gemma 2,
TinyLlama and Phi-3.5 (as Unsloth's notebook names its projections). Every cell runs."""

from __future__ import annotations

from pathlib import Path

import pytest


CELL_COUNTS = {
    "mistral_cpt": 22,
    "mistral_text_completion": 11,
    "llama3_ollama": 24,
    "gpt_oss_finetuning": 20,
    "lfm2_conversational": 23,
    "granite4": 22,
    "gemma2_alpaca": 15,
    "tinyllama_alpaca": 15,
    "magistral_reasoning": 19,
    "phi3_5_conversational": 18,
}
# What each run must print besides running: the trainer's logs, and the family's own traces.
PRINTED = {
    "lfm2_conversational": ("'loss'", "<|im_start|>assistant"),
    "granite4": ("'loss'", "<|start_of_role|>assistant<|end_of_role|>"),
    "gpt_oss_finetuning": ("'loss'", "<|channel|>analysis<|message|>"),
    "llama3_ollama": ("'loss'", 'FROM {__FILE_LOCATION__}\n\nTEMPLATE """Answer each request'),
    "mistral_cpt": ("'loss'",),
    "mistral_text_completion": ("'loss'",),
    "magistral_reasoning": ("'loss'", "[INST]"),
    "phi3_5_conversational": ("'loss'", "<|assistant|>"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    assert not failed, (failed, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    assert all(text in result.stdout for text in PRINTED.get(name, ())), result.stdout[-3000:]
