"""The committed twin is exactly what `nox -s sync` would generate, and means the same as the zoo module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools import drift, sync_twin

REPO_ROOT = Path(__file__).resolve().parent.parent
CANONICAL_PATH = REPO_ROOT / "zoo" / "unsloth_zoo" / "dataset_num_proc.py"
TWIN_PATH = REPO_ROOT / "unsloth" / "unsloth" / "dataset_num_proc.py"


def read_exactly(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def test_twin_is_exactly_the_generated_copy():
    assert TWIN_PATH.is_file(), "unsloth/unsloth/dataset_num_proc.py is missing: run `nox -s sync`"
    assert read_exactly(TWIN_PATH) == sync_twin.render_twin(read_exactly(CANONICAL_PATH)), (
        "unsloth/unsloth/dataset_num_proc.py is stale or hand-edited: run `nox -s sync` and commit the result"
    )


def test_twin_has_no_drift_from_the_canonical_module():
    report = drift.find_drift(
        read_exactly(CANONICAL_PATH),
        read_exactly(TWIN_PATH),
        "zoo/unsloth_zoo/dataset_num_proc.py",
        "unsloth/unsloth/dataset_num_proc.py",
    )
    assert report is None, report


def test_shipped_packages_never_import_libcst():
    offenders = []
    for path in sorted((REPO_ROOT / "zoo").rglob("*.py")) + sorted((REPO_ROOT / "unsloth").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        if any(name.split(".")[0] == "libcst" for name in names):
            offenders.append(path.relative_to(REPO_ROOT).as_posix())
    assert not offenders, f"libcst is a tool dependency only, yet these import it: {offenders}"


@pytest.mark.parametrize("arguments", [[], ["--check"]], ids=["drift", "sync --check"])
def test_real_tools_report_in_sync_on_the_real_files(arguments, capsys):
    tool = drift if not arguments else sync_twin

    assert tool.main(arguments) == 0
    assert capsys.readouterr().err == ""
