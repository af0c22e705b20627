"""The import paths users write stay where they are, whatever moves inside `unsloth/mlx/`.

Each path is written out here by hand, not read from the package's own tables, so a name dropped from a table fails.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NEUTRAL_CWD

FROM_UNSLOTH = [
    "FastLanguageModel",
    "FastModel",
    "FastVisionModel",
    "UnslothTrainer",
    "UnslothTrainingArguments",
    "UnslothVisionDataCollator",
    "MLXTrainer",
    "MLXTrainingConfig",
    "is_bfloat16_supported",
    "memory_stats",
    "mem_get_info",
    "reset_peak_memory_stats",
    "empty_cache",
    "get_chat_template",
    "train_on_responses_only",
    "get_gpu_memory_stats",
    "clear_gpu_memory",
    "RawTextDataLoader",
    "TextPreprocessor",
    # What the published notebooks import beyond the names above.
    "FastLlamaModel",
    "FastMistralModel",
    "FastQwen2Model",
    "FastQwen3Model",
    "FastGemma2Model",
    "FastTextModel",
    "is_bf16_supported",
    "to_sharegpt",
    "standardize_sharegpt",
    "standardize_data_formats",
    "apply_chat_template",
    "PatchDPOTrainer",
    "PatchFastRL",
    "FastSentenceTransformer",
]
FROM_MODULES = {
    "unsloth.chat_templates": [
        "get_chat_template",
        "train_on_responses_only",
        "standardize_sharegpt",
        "standardize_data_formats",
        "to_sharegpt",
    ],
    "unsloth.trainer": ["UnslothTrainer", "UnslothTrainingArguments", "UnslothVisionDataCollator"],
    "unsloth.mlx": [
        "UnslothTrainingArguments",
        "UnslothTrainer",
        "FastLanguageModel",
        "FastModel",
        "FastVisionModel",
        "UnslothVisionDataCollator",
        "get_chat_template",
        "train_on_responses_only",
        "is_bfloat16_supported",
        "memory_stats",
        "mem_get_info",
        "reset_peak_memory_stats",
        "empty_cache",
        "get_gpu_memory_stats",
        "clear_gpu_memory",
        "save_pretrained_gguf",
        "save_pretrained_merged",
        "load_gguf_model",
        "SFTConfig",
        "RawTextDataLoader",
        "TextPreprocessor",
    ],
}
PATHS = [("unsloth", name) for name in FROM_UNSLOTH] + [
    (module, name) for module, names in FROM_MODULES.items() for name in names
]


@pytest.mark.parametrize(("module", "name"), PATHS, ids=[f"{module}.{name}" for module, name in PATHS])
def test_the_import_path_users_write_resolves(module, name):
    assert getattr(importlib.import_module(module), name) is not None


def test_every_name_imports_in_a_fresh_process():
    # In one process the first import can hide a cycle that a user's single `from ... import` line would hit.
    lines = [f"from {module} import {name}" for module, name in PATHS]
    script = "; ".join(lines)
    result = subprocess.run([sys.executable, "-c", script], cwd=NEUTRAL_CWD, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def test_no_folder_of_the_mlx_package_holds_more_than_twelve_modules():
    root = Path(importlib.import_module("unsloth.mlx").__path__[0])
    folders = [root, *(path for path in root.rglob("*") if path.is_dir() and path.name != "__pycache__")]
    counts = {
        str(folder.relative_to(root)): len(set(folder.glob("*.py")) - {folder / "__init__.py"}) for folder in folders
    }
    assert max(counts.values()) <= 12, counts
