"""Published notebooks of the newer families, cell by cell (examples/notebooks/, run by tools/run_cells.py), each on
a tiny model of its own mlx-lm family under its Hub id (examples/notebooks/_families.py): Qwen3 MoE (30B-A3B),
LFM2.5 (1.2B) GRPO, Gemma 4 (E2B) Text, ERNIE 4.5 (21B-A3B) Conversational,
Qwen3 (4B) Instruct and Thinking, Falcon H1 (0.5B) Alpaca, GLM-4.7-Flash and Nemotron 3 Nano.

A cell MLX cannot honour must fail with its refusal by name (REFUSED). A cell that fails on a gap in our code
(GAPS: CUDA Unsloth runs it) must fail exactly so, and its notebook then reports XFAIL naming the gap (the cells
after it may fail in turn); once the gap is fixed that cell runs and the row fails until GAPS is updated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


CELL_COUNTS = {
    "qwen3_moe": 18,
    "lfm2_5_grpo": 36,
    "gemma4_e2b_text": 29,
    "ernie4_5_conversational": 21,
    "qwen3_instruct": 21,
    "qwen3_thinking": 20,
    "falcon_h1_alpaca": 16,
    "glm_flash": 19,
    "nemotron3_nano": 19,
}
_MEDIA = r"content part of type '{}' was given to a text-only model's tokenizer.*FastVisionModel"
# {notebook: {cell index: the refusal its error must match}}: every other cell must run.
REFUSED = {
    "gemma4_e2b_text": {
        3: _MEDIA.format("image"),
        7: _MEDIA.format("audio"),
        8: _MEDIA.format("audio"),
    },
}
# What each run must print besides running: the trainer's logs and the family's own traces.
PRINTED = {
    "qwen3_moe": ("'loss'", "<start_working_out>"),
    "lfm2_5_grpo": ("'loss'", "rewards/check_answer/mean", "rewards/check_numbers/mean", "Question:"),
    "gemma4_e2b_text": ("'loss'", "<|turn>model\n", "The lighthouse blinks green.<turn|>"),
    "ernie4_5_conversational": ("'loss'", "User: What does the lighthouse blink?\nAssistant: The lighthouse"),
    "qwen3_instruct": ("'loss'", "<|im_start|>assistant\nThe lighthouse blinks green.<|im_end|>"),
    "qwen3_thinking": ("'loss'", "<|im_start|>assistant\n<think>\n", "\n</think>\n\n"),
    "falcon_h1_alpaca": ("'loss'", "### Response:\n"),
    "glm_flash": ("'loss'", "<|assistant|><think></think>100 plus 100 is 200."),
    "nemotron3_nano": ("'loss'", "<|im_start|>assistant\n100 plus 100 is 200.<|im_end|>"),
}
# {notebook: {cell index: the error it fails with today}}: where the gap lives is said beside each.
GAPS: dict = {}


def _assert_failed_as(failed: dict, expected: dict, stderr: str) -> None:
    for index, pattern in expected.items():
        assert index in failed and re.search(pattern, failed[index]), (index, failed.get(index), stderr[-3000:])


def _check_files(name: str, workdir: Path) -> None:
    if name == "qwen3_moe":
        # The notebook's MoE target names reach the experts' own projections, not only attention.
        keys = json.loads((workdir / "qwen_lora" / "adapter_config.json").read_text())["lora_parameters"]["keys"]
        assert {"mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj", "mlp.switch_mlp.down_proj"} <= set(keys), keys
    if name == "ernie4_5_conversational":
        assert (workdir / "ernie_finetune" / "unsloth.Q8_0.gguf").is_file()
    if name in ("falcon_h1_alpaca", "nemotron3_nano"):
        folder = "falcon_h1_finetune" if name == "falcon_h1_alpaca" else "nemotron_finetune"
        assert (workdir / folder / "unsloth.Q8_0.gguf").is_file()  # the Mamba 2 hybrids' GGUF cell writes its file
    if name == "glm_flash":
        assert (workdir / "glm_flash_finetune" / "unsloth.Q8_0.gguf").is_file()  # latent attention as deepseek2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs_or_is_refused_by_name(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    _assert_failed_as(failed, GAPS.get(name, {}), result.stderr)
    if name in GAPS:
        pytest.xfail(f"cells {sorted(GAPS[name])} fail on a gap in our code: {GAPS[name]}")
    _assert_failed_as(failed, REFUSED.get(name, {}), result.stderr)
    assert set(failed) == set(REFUSED.get(name, {})), (failed, result.stderr[-3000:])
    assert all(text in result.stdout for text in PRINTED[name]), result.stdout[-3000:]
    _check_files(name, tmp_path)
