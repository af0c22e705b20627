"""Shared test setup: the repo root on sys.path (for `tools`), no warn-once memo leaking between tests, and the
hygiene plugin (tests/hygiene.py): a test reaps what it starts and writes nothing into the checkout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
import tools  # noqa: E402,F401  (takes the root back off sys.path, so `unsloth` is the installed package)

pytest_plugins = ["hygiene"]


@pytest.fixture(autouse=True)
def _fresh_warning_memo():
    from unsloth_zoo import dataset_num_proc

    dataset_num_proc.reset_warning_state()
    yield
    dataset_num_proc.reset_warning_state()


@pytest.fixture(scope="session")
def tokenizer():
    """The real fast BPE tokenizer trained on the shipped corpus (cached outside the checkout, see tokenizer_kit)."""
    from tools.kits.tokenizer_kit import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def maps_really_run():
    """datasets' cache off for a module, so every map really runs instead of answering from an earlier run."""
    import datasets

    datasets.disable_caching()
    yield
    datasets.enable_caching()
