"""Report when unsloth's copy of the worker-count policy means something different from the zoo's.

Both modules are compared as syntax trees with every docstring removed, so comments, blank lines,
quote style, formatting and docstrings may differ; any other change is drift. Standard library only,
so `nox -s drift` needs nothing installed.
"""

from __future__ import annotations

import ast
import difflib
import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))

from tools.cli import Parser, UsageError  # noqa: E402

CANONICAL_RELPATH = "zoo/unsloth_zoo/dataset_num_proc.py"
TWIN_RELPATH = "unsloth/unsloth/dataset_num_proc.py"
FIX_HINT = f"run `nox -s sync` to regenerate {TWIN_RELPATH} from {CANONICAL_RELPATH}"

_DOCSTRING_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_NAME_WIDTH = 72


def find_drift(canonical_text: str, twin_text: str, canonical_name: str, twin_name: str) -> Optional[str]:
    """Return None when the two modules mean the same, else a report naming the first difference.

    Raises SyntaxError (with `filename` set to the given name) when either text does not parse.
    """
    canonical_body = parse_without_docstrings(canonical_text, canonical_name).body
    twin_body = parse_without_docstrings(twin_text, twin_name).body
    canonical_keys = [ast.dump(statement) for statement in canonical_body]
    twin_keys = [ast.dump(statement) for statement in twin_body]
    if canonical_keys == twin_keys:
        return None

    matcher = difflib.SequenceMatcher(None, canonical_keys, twin_keys, autojunk=False)
    regions = [opcode for opcode in matcher.get_opcodes() if opcode[0] != "equal"]
    _, start, stop, twin_start, twin_stop = regions[0]
    lines = [
        f"drift: {twin_name} no longer matches {canonical_name} (docstrings, comments and formatting are ignored)",
        "first difference: "
        + describe_region(canonical_body[start:stop], twin_body[twin_start:twin_stop], canonical_name, twin_name),
        *diff_region(canonical_body, twin_body, (start, stop), (twin_start, twin_stop), canonical_name, twin_name),
    ]
    if len(regions) > 1:
        lines.append(f"... and {len(regions) - 1} more differing region(s) after this one")
    lines.append(FIX_HINT)
    return "\n".join(lines) + "\n"


def parse_without_docstrings(text: str, filename: str) -> ast.Module:
    """Parse `text` and drop every module, class and function docstring."""
    tree = ast.parse(text, filename=filename)
    for node in ast.walk(tree):
        if isinstance(node, _DOCSTRING_OWNERS) and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:]
        elif isinstance(node, ast.Constant):
            # The `u` prefix is spelling, not meaning, just like the choice of quote character.
            node.kind = None
    return tree


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def name_statement(statement: ast.stmt) -> str:
    """Name a top-level statement the way a reader would search for it, e.g. `def f` or `CAP = ...`."""
    if isinstance(statement, ast.FunctionDef):
        return f"def {statement.name}"
    if isinstance(statement, ast.AsyncFunctionDef):
        return f"async def {statement.name}"
    if isinstance(statement, ast.ClassDef):
        return f"class {statement.name}"
    if isinstance(statement, ast.Assign):
        return " = ".join(ast.unparse(target) for target in statement.targets) + " = ..."
    if isinstance(statement, ast.AnnAssign):
        return f"{ast.unparse(statement.target)} = ..."
    first_line = ast.unparse(statement).splitlines()[0]
    return first_line if len(first_line) <= _NAME_WIDTH else first_line[: _NAME_WIDTH - 3] + "..."


def describe_region(
    canonical_part: Sequence[ast.stmt], twin_part: Sequence[ast.stmt], canonical_name: str, twin_name: str
) -> str:
    """Say which statement differs first and where it sits in each file."""
    if canonical_part and twin_part:
        canonical_first, twin_first = canonical_part[0], twin_part[0]
        title = name_statement(canonical_first)
        if name_statement(twin_first) != title:
            title += f" (the twin has {name_statement(twin_first)} there)"
        return f"{title} at {canonical_name}:{canonical_first.lineno} and {twin_name}:{twin_first.lineno}"
    if canonical_part:
        return f"{name_statement(canonical_part[0])} at {canonical_name}:{canonical_part[0].lineno} is missing from {twin_name}"
    return f"{name_statement(twin_part[0])} at {twin_name}:{twin_part[0].lineno} is not in {canonical_name}"


def diff_region(
    canonical_body: Sequence[ast.stmt],
    twin_body: Sequence[ast.stmt],
    canonical_span: tuple[int, int],
    twin_span: tuple[int, int],
    canonical_name: str,
    twin_name: str,
) -> list[str]:
    """Unified diff of both sides' docstring-free source for the differing statements and one neighbour each way."""
    canonical_lines = _unparse_around(canonical_body, *canonical_span)
    twin_lines = _unparse_around(twin_body, *twin_span)
    if canonical_lines == twin_lines:
        # Two trees can differ in ways source text hides; the tree dump then shows what changed.
        canonical_lines = _dump_lines(canonical_body[canonical_span[0] : canonical_span[1]])
        twin_lines = _dump_lines(twin_body[twin_span[0] : twin_span[1]])
    return list(
        difflib.unified_diff(
            canonical_lines,
            twin_lines,
            fromfile=f"{canonical_name} (docstrings stripped)",
            tofile=f"{twin_name} (docstrings stripped)",
            lineterm="",
        )
    )


def _unparse_around(body: Sequence[ast.stmt], start: int, stop: int) -> list[str]:
    lines: list[str] = []
    previous_was_block = False
    for statement in body[max(start - 1, 0) : stop + 1]:
        source = ast.unparse(statement).splitlines()
        is_block = len(source) > 1
        if lines and (is_block or previous_was_block):
            lines.append("")  # Blank lines set multi-line definitions apart, as in the real file.
        lines.extend(source)
        previous_was_block = is_block
    return lines


def _dump_lines(statements: Sequence[ast.stmt]) -> list[str]:
    return [line for statement in statements for line in ast.dump(statement, indent=1).splitlines()]


def _build_parser() -> Parser:
    parser = Parser(
        prog="drift.py", description="Compare the twin policy module with the canonical one.", add_help=False
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this message and exit")
    parser.add_argument("--canonical", type=Path, default=REPO_ROOT / CANONICAL_RELPATH, help="canonical module")
    parser.add_argument("--twin", type=Path, default=REPO_ROOT / TWIN_RELPATH, help="generated copy to compare")
    return parser


def display_path(path: Path) -> str:
    """Name a path relative to the repository when it lies inside it, so messages match the docs."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Exit 0 when the twin matches, 1 on drift (with a report), 2 on bad arguments or unreadable files."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _build_parser()
    try:
        options = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except UsageError as error:
        stderr.write(f"{parser.format_usage()}drift: {error}\n")
        return 2
    if options.help:
        stdout.write(parser.format_help())
        return 0

    canonical_name, twin_name = display_path(options.canonical), display_path(options.twin)
    for path, name in ((options.canonical, canonical_name), (options.twin, twin_name)):
        if not path.is_file():
            stderr.write(f"drift: {name} does not exist\n")
            return 2
    try:
        report = find_drift(
            options.canonical.read_text(encoding="utf-8"),
            options.twin.read_text(encoding="utf-8"),
            canonical_name,
            twin_name,
        )
    except SyntaxError as error:
        stderr.write(f"drift: cannot parse {error.filename}, line {error.lineno}: {error.msg}\n")
        return 2
    if report is not None:
        stdout.write(report)
        return 1
    stdout.write(f"{twin_name} matches {canonical_name} (docstrings, comments and formatting ignored)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
