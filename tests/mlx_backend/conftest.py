"""Fixtures for the MLX backend tests: one tiny random-weight llama folder per session, fresh copies per test."""

from __future__ import annotations

import os

# Nothing here may reach a model hub, and transformers' "PyTorch was not found" notice is noise in this venv.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import pytest  # noqa: E402
from mlx_test_kit import MEMORISE_TEXTS, EventRecorder  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def _absent(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return True


# Probe `mlx.core`: `mlx` itself is a namespace package, so a bare `mlx` can resolve without the library.
MISSING = [name for name in ("mlx.core", "mlx_lm", "transformers") if _absent(name)]
# A session without the MLX stack (the main `tests` session) skips this folder, and says so in its header.
collect_ignore_glob = ["test_*.py"] if MISSING else []


def pytest_report_header() -> list:
    return [f"tests/mlx_backend not collected: {', '.join(MISSING)} not installed"] if MISSING else []


@pytest.fixture(autouse=True)
def _runs_in_a_folder_of_its_own(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A default output_dir lands in the test's own folder (tests/hygiene.py fails a test that writes into the checkout)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    root = tmp_path_factory.mktemp("tiny-llama")
    return build_tiny_mlx_model(root / "model", tokenizer_cache_dir=root / "tokenizers")


@pytest.fixture
def load_tiny(tiny_model_dir: Path) -> Callable[..., tuple]:
    """Load a fresh copy of the tiny model; `lora=True` also puts rank-8 LoRA on it with a fixed seed."""

    def load(lora: bool = False, dropout: float = 0.0) -> tuple:
        import mlx.core as mx

        from unsloth_zoo.mlx import apply_lora, load_model

        model, tokenizer = load_model(tiny_model_dir)
        if lora:
            mx.random.seed(0)
            apply_lora(model, rank=8, alpha=16, dropout=dropout)
        return model, tokenizer

    return load


@pytest.fixture
def memorise_rows() -> list:
    return [{"text": text} for text in MEMORISE_TEXTS]


@pytest.fixture
def config(tmp_path: Path) -> Callable[..., Any]:
    """An MLXTrainingConfig writing into this test's temp folder, quiet and short unless told otherwise."""

    def make(**overrides: Any) -> Any:
        from unsloth_zoo.mlx import MLXTrainingConfig

        values = {
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "max_steps": 4,
            "warmup_steps": 0,
            "learning_rate": 3e-3,
            "save_strategy": "no",
            "output_dir": str(tmp_path / "out"),
            "max_seq_length": 32,
        }
        values.update(overrides)
        return MLXTrainingConfig(**values)

    return make


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()
