"""Every `.map(` call in both packages goes through `sized_map`: the policy's, or `unsloth_num_proc`'s."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent
PACKAGE_ROOTS = [REPO / "zoo" / "unsloth_zoo", REPO / "unsloth" / "unsloth", REPO / "unsloth" / "unsloth_studio"]
LOADER = REPO / "unsloth" / "unsloth_num_proc.py"
# The one function allowed to call `.map(` itself, in the policy, its twin and the loader.
WAY_IN = "sized_map"


def bare_map_calls(source: str) -> List[Tuple[int, str]]:
    """(line, enclosing function) of each `<anything>.map(...)` call outside a function named WAY_IN."""
    found: List[Tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "map":
            if function != WAY_IN:
                found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def _package_files() -> List[Path]:
    return sorted(path for root in PACKAGE_ROOTS for path in root.rglob("*.py")) + [LOADER]


def test_every_map_call_in_the_packages_goes_through_sized_map():
    offenders = [
        f"{path.relative_to(REPO)}:{line} in {function}()"
        for path in _package_files()
        for line, function in bare_map_calls(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        "these call .map( directly; call sized_map(dataset, function, request, **map_kwargs) from the policy "
        "(zoo) or unsloth_num_proc (unsloth) instead, so rows, closure and diagnostics are never left out:\n  "
        + "\n  ".join(offenders)
    )


def test_the_way_in_itself_is_where_the_maps_are():
    # The scan has something to find: each sized_map really calls .map( (else the check above proves nothing).
    for path in (REPO / "zoo" / "unsloth_zoo" / "dataset_num_proc.py", LOADER):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        way_in = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == WAY_IN]
        assert len(way_in) == 1 and bare_map_calls(ast.unparse(way_in[0].body[-1])), path


def test_a_bare_map_call_is_found_wherever_it_sits():
    source = (
        "def sized_map(dataset, f):\n    return dataset.map(f)\n"
        "def tokenize(dataset, f):\n    return dataset.map(f, num_proc=None)\n"
        "class Site:\n    def run(self, ds):\n        return [ds.map(lambda row: row) for _ in range(2)][0]\n"
        "rows = frame.map(str)\n"
    )
    assert bare_map_calls(source) == [(4, "tokenize"), (7, "run"), (8, "<module>")]
