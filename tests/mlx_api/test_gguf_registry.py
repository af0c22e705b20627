"""GGUF export looks each family up in a registry: convert.py never branches on a model type or architecture name,
and a family module's `CONVERTERS` is all it takes to register one."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

CONVERT = Path(__file__).resolve().parents[2] / "unsloth" / "unsloth" / "mlx" / "gguf" / "convert.py"
_FAMILY_NAMES = ("model_type", "architecture")


def _mentions_family(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in _FAMILY_NAMES:
            return True
        if isinstance(inner, ast.Attribute) and inner.attr in _FAMILY_NAMES:
            return True
        if isinstance(inner, ast.Constant) and inner.value in _FAMILY_NAMES:
            return True
    return False


def _holds_string_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_holds_string_literal(item) for item in node.elts)
    return False


def family_branches(source: str) -> list:
    """Each comparison of a model type or architecture against a string literal (or a collection of them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_mentions_family(side) for side in sides) and any(_holds_string_literal(side) for side in sides):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    "branch",
    [
        'if model_type == "llama":\n    pass',
        'if config.get("model_type") in ("ernie4_5", "ernie4_5_moe"):\n    pass',
        'if family.architecture == "gemma4":\n    pass',
        'x = "qwen3_moe" != config["model_type"]',
        'if family.architecture in {"qwen35", "qwen35moe"}:\n    pass',
    ],
)
def test_the_scan_finds_a_branch_on_a_family_name(branch):
    assert family_branches(branch)


@pytest.mark.parametrize(
    "fine",
    [
        'if wanted == "F32":\n    pass',
        'converter = converter_for(str(config.get("model_type")))',
        'if name.endswith("norm.weight"):\n    pass',
    ],
)
def test_the_scan_leaves_other_comparisons_alone(fine):
    assert family_branches(fine) == []


def test_convert_py_looks_families_up_instead_of_branching_on_them():
    branches = family_branches(CONVERT.read_text(encoding="utf-8"))
    assert branches == [], (
        "convert.py compares a model type or architecture with a name; give that family's converter a hook "
        f"(unsloth/mlx/gguf/converters/base.py) instead: {branches}"
    )


def test_every_registered_entry_is_a_converter_with_a_gguf_architecture():
    import gguf

    from unsloth.mlx.gguf.converters.base import Converter
    from unsloth.mlx.gguf.registry import text_converters

    entries = text_converters()
    assert len(entries) >= 40
    for model_type, entry in entries.items():
        assert isinstance(entry, Converter), model_type
        assert entry.family.arch in gguf.MODEL_ARCH_NAMES, model_type


def _package(root: Path, name: str, modules: dict) -> str:
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for module, text in modules.items():
        (folder / f"{module}.py").write_text(textwrap.dedent(text))
    return name


def test_a_module_of_its_own_is_all_a_new_entry_needs(tmp_path, monkeypatch):
    from unsloth.mlx.gguf.registry import collect

    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package(
        tmp_path,
        "registry_kit_one",
        {"first": "CONVERTERS = {'alpha': 1}", "second": "CONVERTERS = {'beta': 2}", "helpers": "X = 3"},
    )
    assert collect(package) == {"alpha": 1, "beta": 2}
    for name in [name for name in sys.modules if name.startswith(package)]:
        sys.modules.pop(name)


def test_a_type_two_modules_register_is_refused_by_name(tmp_path, monkeypatch):
    from unsloth.mlx.gguf.registry import collect

    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package(
        tmp_path, "registry_kit_two", {"first": "CONVERTERS = {'alpha': 1}", "second": "CONVERTERS = {'alpha': 2}"}
    )
    with pytest.raises(RuntimeError, match=r"'alpha' is registered by both registry_kit_two.first and .*second"):
        collect(package)
    for name in [name for name in sys.modules if name.startswith(package)]:
        sys.modules.pop(name)
