"""Read a module's top-level literal constants without importing it.

Tests use this to check that a value restated elsewhere (a row threshold, a worker cap) still equals
the one in the canonical policy module, even where importing that module would be costly or unsafe.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Sequence, TextIO

_MISSING = object()


def read_literal_constants(path: str | Path) -> dict[str, object]:
    """Return {name: value} for each module-level `NAME = literal` or `NAME: type = literal` in `path`."""
    return parse_literal_constants(Path(path).read_text(encoding="utf-8"), str(path))


def parse_literal_constants(source_text: str, filename: str = "<source>") -> dict[str, object]:
    """Like read_literal_constants, for text already in hand."""
    constants: dict[str, object] = {}
    for statement in ast.parse(source_text, filename=filename).body:
        for name, value in _bindings(statement):
            # A later non-literal rebinding makes the earlier literal a lie, so the name is dropped.
            if value is _MISSING:
                constants.pop(name, None)
            else:
                constants[name] = value
    return constants


def _bindings(statement: ast.stmt) -> list[tuple[str, object]]:
    if isinstance(statement, ast.Assign):
        value = _literal_or_missing(statement.value)
        bindings: list[tuple[str, object]] = []
        for target in statement.targets:
            if isinstance(target, ast.Name):
                bindings.append((target.id, value))
            else:
                bindings.extend((name, _MISSING) for name in _rebound_names(target))
        return bindings
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        if statement.value is None:
            return []
        return [(statement.target.id, _literal_or_missing(statement.value))]
    return [(name, _MISSING) for name in _rebound_names(statement)]


def _rebound_names(node: ast.AST) -> list[str]:
    """Names a non-literal statement may bind at module level (defs, imports, loop and `with` targets...)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    if isinstance(node, ast.Name):
        return [node.id] if isinstance(node.ctx, ast.Store) else []
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return []
    return [name for child in ast.iter_child_nodes(node) for name in _rebound_names(child)]


def _literal_or_missing(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Print `NAME = value` for each literal constant in the one file named; 2 on bad usage or input."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    arguments = sys.argv[1:] if argv is None else list(argv)
    if len(arguments) != 1 or arguments[0].startswith("-"):
        stderr.write("usage: constants_canary.py PATH\n")
        return 2
    path = Path(arguments[0])
    if not path.is_file():
        stderr.write(f"constants_canary: {path} does not exist\n")
        return 2
    try:
        constants = read_literal_constants(path)
    except SyntaxError as error:
        stderr.write(f"constants_canary: cannot parse {path}, line {error.lineno}: {error.msg}\n")
        return 2
    for name, value in constants.items():
        stdout.write(f"{name} = {value!r}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
