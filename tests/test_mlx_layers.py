# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The subpackages of `unsloth.mlx` import one way, in the order `unsloth/mlx/layers.py` states, read from the AST;
and no modules, in `unsloth` (`unsloth.mlx` included), `tools` or `unsloth_zoo`, import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Set, Tuple

import pytest

MLX_ROOT = Path(__file__).resolve().parents[1] / "unsloth" / "unsloth" / "mlx"
TOOLS_ROOT = Path(__file__).resolve().parents[1] / "tools"
PACKAGE = "unsloth.mlx"
TOP = "(top modules)"


def stated_constant(layers_file: Path, name: str) -> tuple:
    """A literal assigned at the top of `layers.py`, read without importing the package."""
    for node in ast.parse(layers_file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{layers_file} assigns no {name}")


def _module_name(root: Path, path: Path, package: str = PACKAGE) -> Tuple[str, bool]:
    """The dotted name of a file under `root` (the folder of `package`) and whether it is a package's `__init__`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join([package, *parts]), is_package


def _resolve(module: str, is_package: bool, level: int, target: str) -> str:
    """An import's absolute module name; `level` counts the leading dots of a relative one."""
    if level == 0:
        return target
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target]) if target else ".".join(base)


def _literal_prefix(node: ast.expr) -> str:
    """A string literal, or the constant head of an f-string (`f"unsloth.mlx.rl.{name}"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return ""


def imported_modules(source: str, module: str, is_package: bool) -> Iterator[Tuple[int, str]]:
    """(line, absolute module) for every import in `source`, at any depth, and every `import_module` literal."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module or "")
            # `from .. import vision` names modules, not attributes, so each name is its own edge.
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                target = _literal_prefix(node.args[0])
                if target:
                    yield node.lineno, target.rstrip(".")


def layer_of(module: str, layers: Sequence[str]) -> str:
    """The layer a module under `unsloth.mlx` belongs to, or "" for a module outside the package."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return ""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in layers else TOP


def upward_imports(root: Path, layers: Sequence[str]) -> List[Tuple[str, int, str, str, str]]:
    """Each import from a lower layer to a higher one: (file, line, its layer, the layer imported, module)."""
    rank = {name: index for index, name in enumerate(layers)}
    rank[TOP] = len(layers)
    found = []
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_name(root, path)
        here = layer_of(module, layers)
        for line, target in imported_modules(path.read_text(encoding="utf-8"), module, is_package):
            there = layer_of(target, layers)
            if there and rank[there] > rank[here]:
                found.append((path.relative_to(root).as_posix(), line, here, there, target))
    return found


def unplaced_subpackages(root: Path, layers: Sequence[str]) -> Set[str]:
    """Subpackages the order does not name, so nobody can tell which way they may import."""
    return {path.parent.name for path in root.glob("*/__init__.py")} - set(layers)


def _report(edges: Sequence[Tuple[str, int, str, str, str]]) -> str:
    return "\n".join(
        f"{file}:{line}: {here} imports {target} ({there} is above it)" for file, line, here, there, target in edges
    )


Edge = Tuple[str, int, str]


def import_graph(root: Path, package: str) -> Dict[str, List[Edge]]:
    """Each file under `root` with its imports of other files there, as (file, line, file imported)."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_name(root, path, package)
        files[module] = (path, is_package)
    graph: Dict[str, List[Edge]] = {}
    for module, (path, is_package) in files.items():
        here = path.relative_to(root).as_posix()
        graph[here] = []
        for line, target in imported_modules(path.read_text(encoding="utf-8"), module, is_package):
            # `from .collator import pad_tokens` names an attribute: the file is the longest prefix that is a module.
            parts = target.split(".")
            while parts and ".".join(parts) not in files:
                parts.pop()
            there = files[".".join(parts)][0].relative_to(root).as_posix() if parts else ""
            if there and there != here and (here, line, there) not in graph[here]:
                graph[here].append((here, line, there))
    return graph


def import_circles(graph: Dict[str, List[Edge]]) -> List[List[Edge]]:
    """The imports inside each group of files that reach each other (Tarjan's strongly connected components)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    circles: List[List[Edge]] = []

    def visit(file: str) -> None:
        index[file] = low[file] = len(index)
        stack.append(file)
        for _, _, there in graph[file]:
            if there not in index:
                visit(there)
                low[file] = min(low[file], low[there])
            elif there in stack:
                low[file] = min(low[file], index[there])
        if low[file] == index[file]:
            group = {stack.pop()}
            while file not in group:
                group.add(stack.pop())
            if len(group) > 1:
                circles.append(sorted(edge for member in group for edge in graph[member] if edge[2] in group))

    for file in sorted(graph):
        if file not in index:
            visit(file)
    return sorted(circles)


def _circles_report(circles: Sequence[Sequence[Edge]]) -> str:
    return "\n".join(
        f"circle {number}:\n" + "\n".join(f"  {file}:{line} imports {there}" for file, line, there in circle)
        for number, circle in enumerate(circles, 1)
    )


LAYERS = stated_constant(MLX_ROOT / "layers.py", "LAYERS")
PENDING = set(stated_constant(MLX_ROOT / "layers.py", "PENDING_UPWARD_IMPORTS"))


def test_every_subpackage_has_a_place_in_the_order() -> None:
    assert not unplaced_subpackages(MLX_ROOT, LAYERS), (
        f"add these to LAYERS in unsloth/mlx/layers.py: {sorted(unplaced_subpackages(MLX_ROOT, LAYERS))}"
    )


def test_no_subpackage_imports_a_higher_layer() -> None:
    edges = [edge for edge in upward_imports(MLX_ROOT, LAYERS) if (edge[0], edge[3]) not in PENDING]
    assert not edges, f"imports against the layer order {' < '.join(LAYERS)}:\n{_report(edges)}"


def test_pending_upward_imports_are_still_there() -> None:
    present = {(edge[0], edge[3]) for edge in upward_imports(MLX_ROOT, LAYERS)}
    assert PENDING <= present, f"remove from PENDING_UPWARD_IMPORTS, now gone: {sorted(PENDING - present)}"


def test_the_doc_quotes_the_order() -> None:
    layout = (MLX_ROOT.parents[2] / "docs" / "layout.md").read_text(encoding="utf-8")
    assert " < ".join(f"`{name}`" for name in LAYERS) in layout


@pytest.mark.parametrize(
    "root, package",
    [
        (MLX_ROOT, PACKAGE),
        (MLX_ROOT.parent, "unsloth"),
        (TOOLS_ROOT, "tools"),
        (TOOLS_ROOT.parent / "zoo" / "unsloth_zoo", "unsloth_zoo"),
    ],
    ids=["unsloth.mlx", "unsloth", "tools", "unsloth_zoo"],
)
def test_no_modules_import_each_other_in_a_circle(root: Path, package: str) -> None:
    circles = import_circles(import_graph(root, package))
    folder = root.relative_to(TOOLS_ROOT.parent)
    assert not circles, f"files under {folder}/ that import each other; give the shared piece a lower home:\n" + (
        _circles_report(circles)
    )


def _plant(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    """A package shaped like `unsloth/mlx`, every import in it downward."""
    for name in ("__init__.py", "chat/__init__.py", "models/__init__.py", "training/__init__.py"):
        _plant(tmp_path, name, "")
    _plant(tmp_path, "activation.py", "import importlib\nimportlib.import_module('unsloth.mlx.training.trainer')\n")
    _plant(tmp_path, "models/language.py", "from ..chat import templates\nfrom . import hub\n")
    _plant(tmp_path, "training/trainer.py", "from unsloth.mlx.models.language import load\n")
    return tmp_path


ORDER = ("chat", "models", "training")


def test_a_downward_tree_passes(small_tree: Path) -> None:
    assert upward_imports(small_tree, ORDER) == []


@pytest.mark.parametrize(
    "planted, line, target",
    [
        ("from ..training.arguments import normalised_name\n", 1, "unsloth.mlx.training.arguments.normalised_name"),
        ("def save():\n    from ..training import trainer\n", 2, "unsloth.mlx.training.trainer"),
        ("import unsloth.mlx.training.trainer\n", 1, "unsloth.mlx.training.trainer"),
        (
            "import importlib\nimportlib.import_module('unsloth.mlx.training.trainer')\n",
            2,
            "unsloth.mlx.training.trainer",
        ),
        (
            "from importlib import import_module\nimport_module(f'unsloth.mlx.training.{x}')\n",
            2,
            "unsloth.mlx.training",
        ),
        ("from .. import activation\n", 1, "unsloth.mlx.activation"),
    ],
)
def test_a_planted_upward_import_is_named(small_tree: Path, planted: str, line: int, target: str) -> None:
    _plant(small_tree, "models/merged.py", planted)
    there = target.split(".")[2] if target.split(".")[2] in ORDER else TOP
    assert upward_imports(small_tree, ORDER) == [("models/merged.py", line, "models", there, target)]


def test_a_subpackage_missing_from_the_order_is_named(small_tree: Path) -> None:
    _plant(small_tree, "vision/__init__.py", "")
    assert unplaced_subpackages(small_tree, ORDER) == {"vision"}


def test_a_tree_without_circles_has_none(small_tree: Path) -> None:
    assert import_circles(import_graph(small_tree, PACKAGE)) == []


def test_a_planted_circle_inside_a_subpackage_is_named_with_its_lines(small_tree: Path) -> None:
    _plant(small_tree, "models/hub.py", "import json\n\ndef push():\n    from .language import load\n")
    assert import_circles(import_graph(small_tree, PACKAGE)) == [
        [("models/hub.py", 4, "models/language.py"), ("models/language.py", 2, "models/hub.py")]
    ]


def test_a_circle_of_three_through_a_package_face_is_named(small_tree: Path) -> None:
    _plant(small_tree, "training/__init__.py", "from .trainer import Trainer\n")
    _plant(small_tree, "models/hub.py", "from unsloth.mlx.training import Trainer\n")
    assert import_circles(import_graph(small_tree, PACKAGE)) == [
        [
            ("models/hub.py", 1, "training/__init__.py"),
            ("models/language.py", 2, "models/hub.py"),
            ("training/__init__.py", 1, "training/trainer.py"),
            ("training/trainer.py", 1, "models/language.py"),
        ]
    ]
