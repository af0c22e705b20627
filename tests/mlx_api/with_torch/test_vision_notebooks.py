"""Published vision notebooks, cell by cell (examples/notebooks/*vision*.py, run by tools/run_cells.py), each on a
tiny model of its own mlx-vlm family under its Hub id with coloured squares in its dataset's columns.

They run in the mlx_torch session, which has the CPU torch beside mlx-vlm, so the notebooks' `import torch` and
memory-stat cells run as on a Mac with torch installed. A cell MLX cannot honour must fail with its refusal by name
(REFUSED), and nothing else may. A gap in our code goes in GAPS (the row then reports XFAIL naming it)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict

import pytest

from ..conftest import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "examples" / "notebooks"
CELL_COUNTS = {
    "qwen3_vl_vision": 22,
    "gemma4_e2b_vision": 22,
    "llama3_2_vision": 20,
    "qwen2_5_vl_grpo_vision": 19,
    "gemma3_4b_grpo_vision": 20,
    "qwen3_vl_grpo_vision": 19,
    "qwen3_5_vision_grpo": 19,
    "pixtral_vision": 16,
    "ministral3_vl_vision": 22,
    "paddle_ocr_vision": 22,
    "lfm2_5_vl_vision": 22,
}
# {notebook: {cell index: the refusal its error must match}}.
REFUSED: Dict[str, Dict[int, str]] = {}
# What each run must print: the trainer's logs and the family's end of turn from a generation.
# Qwen's GRPO rewards print the prompt the chat template rendered, its image placeholder included.
QWEN_IMAGE_PROMPT = "Question:\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>How many red"
PRINTED = {
    "qwen3_vl_vision": ("'loss'", "'train_runtime'", "A blue square."),
    "gemma4_e2b_vision": ("'loss'", "'train_runtime'", "A blue square."),
    "llama3_2_vision": ("'loss'", "'train_runtime'", "A red square."),
    "pixtral_vision": ("'loss'", "'train_runtime'", "'index': 0, 'text': None, 'type': 'image'"),
    "qwen2_5_vl_grpo_vision": ("rewards/formatting_reward_func/mean", "'train_runtime'", "Question:\n<|im_start|>user"),
    "gemma3_4b_grpo_vision": ("rewards/formatting_reward_func/mean", "'train_runtime'", "<start_of_image>How many red"),
    "qwen3_vl_grpo_vision": ("rewards/formatting_reward_func/mean", "'train_runtime'", QWEN_IMAGE_PROMPT),
    "qwen3_5_vision_grpo": ("rewards/formatting_reward_func/mean", "'train_runtime'", QWEN_IMAGE_PROMPT),
    "ministral3_vl_vision": ("'loss'", "'train_runtime'", "A blue square."),
    # A full-finetuning load: get_peft_model adds no LoRA, as on CUDA.
    "paddle_ocr_vision": ("'loss'", "'train_runtime'", "Full finetuning is enabled, so .get_peft_model has no effect"),
    "lfm2_5_vl_vision": ("'loss'", "'train_runtime'", "<|im_start|>assistant\nA square of one colour.<|im_end|>"),
}
# The files each notebook's save cells must leave in its working folder.
SAVED = {
    "qwen3_vl_vision": ("qwen_lora/adapter_config.json", "qwen_lora/adapters.safetensors"),
    "gemma4_e2b_vision": ("gemma_4_lora/adapter_config.json", "gemma_4_lora/chat_template.jinja"),
    "llama3_2_vision": ("llama_lora/adapter_config.json",),
    "pixtral_vision": ("pixtral_lora/adapter_config.json", "pixtral_lora/adapters.safetensors"),
    "qwen2_5_vl_grpo_vision": ("grpo_lora/adapter_config.json", "grpo_lora/adapter_model.safetensors"),
    "gemma3_4b_grpo_vision": ("gemma_3_lora/adapter_config.json", "gemma_3_lora/adapters.safetensors"),
    "qwen3_vl_grpo_vision": ("grpo_lora/adapter_config.json", "grpo_lora/adapter_model.safetensors"),
    "qwen3_5_vision_grpo": ("qwen_lora/adapter_config.json", "qwen_lora/adapter_model.safetensors"),
    "ministral3_vl_vision": ("ministral_lora/adapter_config.json", "ministral_lora/adapters.safetensors"),
    # The whole fine-tuned model, as CUDA Unsloth saves a full fine-tune (the folder keeps the notebook's name).
    "paddle_ocr_vision": ("paddle_ocr_lora/config.json", "paddle_ocr_lora/model.safetensors"),
    "lfm2_5_vl_vision": ("lfm_lora/adapter_config.json", "lfm_lora/adapters.safetensors"),
}
# {notebook: {cell index: the error it fails with today}}, where the gap lives said beside each.
GAPS: Dict[str, Dict[int, str]] = {}


def _assert_failed_as(failed: dict, expected: dict, stderr: str) -> None:
    for index, pattern in expected.items():
        assert index in failed and re.search(pattern, failed[index]), (index, failed.get(index), stderr[-3000:])


def test_every_vision_script_is_counted() -> None:
    assert {path.stem for path in NOTEBOOKS.glob("*vision*.py")} == set(CELL_COUNTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELL_COUNTS))
def test_every_cell_runs_or_is_refused_by_name(name: str, tmp_path: Path, run_notebook) -> None:
    result, cells = run_notebook(name, tmp_path, timeout=600)
    assert len(cells) == CELL_COUNTS[name], result.stderr[-3000:]
    failed = {cell["cell"]: cell["error"] for cell in cells if not cell["ok"]}
    _assert_failed_as(failed, GAPS.get(name, {}), result.stderr)
    if name in GAPS:
        pytest.xfail(f"cells {sorted(GAPS[name])} fail on a gap in our code: {GAPS[name]}")
    expected = REFUSED.get(name, {})
    _assert_failed_as(failed, expected, result.stderr)
    assert set(failed) == set(expected), (failed, result.stderr[-3000:])
    assert all(text in result.stdout for text in PRINTED[name]), result.stdout[-3000:]
    assert all((tmp_path / file).is_file() for file in SAVED.get(name, ())), sorted(os.listdir(tmp_path))
