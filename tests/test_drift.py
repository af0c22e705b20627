"""tools/drift.py: cosmetic edits of the real canonical module pass, edits that change meaning are caught.

Every pair is built from the real zoo module's text, located with `ast` rather than text anchors,
because that module keeps changing. tools/constants_canary.py is tested at the end.
"""

from __future__ import annotations

import ast
import copy
import io
import sys
import tokenize
from pathlib import Path
from typing import Callable

import pytest

from tools import constants_canary, drift

REPO_ROOT = Path(__file__).resolve().parent.parent
CANONICAL_PATH = REPO_ROOT / "zoo" / "unsloth_zoo" / "dataset_num_proc.py"
FIX_LINE = (
    "run `nox -s sync` to regenerate unsloth/unsloth/dataset_num_proc.py from zoo/unsloth_zoo/dataset_num_proc.py"
)
CANONICAL_NAME = "zoo/unsloth_zoo/dataset_num_proc.py"
TWIN_NAME = "unsloth/unsloth/dataset_num_proc.py"


@pytest.fixture(scope="module")
def canonical_text() -> str:
    return CANONICAL_PATH.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- editing helpers


def _offset(lines: list[str], lineno: int, utf8_column: int) -> int:
    """Character offset of an ast position (1-based line, UTF-8 byte column) in the joined text."""
    line = lines[lineno - 1]
    return sum(len(earlier) for earlier in lines[: lineno - 1]) + len(
        line.encode("utf-8")[:utf8_column].decode("utf-8")
    )


def _start(node: ast.AST) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", None)
    # A decorated definition starts at its first `@`, which sits at the definition's own column.
    return (decorators[0].lineno, node.col_offset) if decorators else (node.lineno, node.col_offset)


def replace_span(text: str, first: ast.AST, last: ast.AST, new_source: str) -> str:
    lines = text.splitlines(keepends=True)
    begin = _offset(lines, *_start(first))
    end = _offset(lines, last.end_lineno, last.end_col_offset)
    return text[:begin] + new_source + text[end:]


def replace_expression(text: str, node: ast.expr, new_node_or_source) -> str:
    source = new_node_or_source if isinstance(new_node_or_source, str) else ast.unparse(new_node_or_source)
    return replace_span(text, node, node, f"({source})")


def render_statements(statements: list[ast.stmt], column: int) -> str:
    rendered = "\n".join(ast.unparse(statement) for statement in statements)
    return rendered.replace("\n", "\n" + " " * column)


def replace_statement(text: str, statement: ast.stmt, new_statement: ast.stmt) -> str:
    return replace_span(text, statement, statement, render_statements([new_statement], statement.col_offset))


def delete_lines(text: str, first_line: int, last_line: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: first_line - 1] + lines[last_line:])


def insert_line_before(text: str, lineno: int, new_line: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: lineno - 1] + [new_line + "\n"] + lines[lineno - 1 :])


def swap_adjacent(text: str, first: ast.stmt, second: ast.stmt) -> str:
    return replace_span(text, first, second, render_statements([second, first], first.col_offset))


def nodes_outside_fstrings(tree: ast.AST) -> list[ast.AST]:
    """Every node in walk order except those inside f-strings, whose positions older Pythons misreport."""
    inside = {id(child) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for child in ast.walk(node)}
    return [node for node in ast.walk(tree) if id(node) not in inside]


def first_node(tree: ast.AST, wanted: Callable[[ast.AST], bool], what: str) -> ast.AST:
    for node in nodes_outside_fstrings(tree):
        if wanted(node):
            return node
    pytest.fail(f"the canonical module has no {what} to mutate")


def module_assignment(tree: ast.Module, name: str) -> ast.Assign:
    return first_node(
        tree,
        lambda node: (
            node in tree.body
            and isinstance(node, (ast.Assign, ast.AnnAssign))
            and any(isinstance(target, ast.Name) and target.id == name for target in _targets(node))
        ),
        f"module-level assignment to {name}",
    )


def _targets(node: ast.AST) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def function_named(tree: ast.Module, name: str) -> ast.FunctionDef:
    return first_node(tree, lambda node: isinstance(node, ast.FunctionDef) and node.name == name, f"def {name}")


def is_string_statement(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def has_docstring(node: ast.AST) -> bool:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return isinstance(node, owners) and bool(node.body) and is_string_statement(node.body[0])


def call_name(call: ast.Call) -> str:
    function = call.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", "")


# --------------------------------------------------------------------------- edits that change meaning


def change_numeric_constant(text: str) -> str:
    value = module_assignment(ast.parse(text), "AUTO_NUM_PROC_CAP").value
    return replace_expression(text, value, repr(value.value + 1))


def respell_float_constant_as_int(text: str) -> str:
    value = module_assignment(ast.parse(text), "WORKER_MEMORY_BUDGET_GB").value
    assert isinstance(value.value, float) and value.value.is_integer()
    return replace_expression(text, value, repr(int(value.value)))


FLIPPED = {ast.LtE: ast.Lt, ast.Lt: ast.LtE, ast.GtE: ast.Gt, ast.Gt: ast.GtE, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def flip_comparison(text: str) -> str:
    tree = ast.parse(text)
    compares = [node for node in nodes_outside_fstrings(tree) if isinstance(node, ast.Compare)]
    # Prefer the `<=` to `<` flip; any flippable comparison will do if the module has none.
    chosen = next((node for node in compares if isinstance(node.ops[0], ast.LtE)), None) or first_node(
        tree, lambda node: isinstance(node, ast.Compare) and type(node.ops[0]) in FLIPPED, "flippable comparison"
    )
    flipped = copy.deepcopy(chosen)
    flipped.ops[0] = FLIPPED[type(chosen.ops[0])]()
    return replace_expression(text, chosen, flipped)


def drop_else_branch(text: str) -> str:
    statement = first_node(ast.parse(text), lambda node: isinstance(node, ast.If) and node.orelse, "if/else")
    pruned = copy.deepcopy(statement)
    pruned.orelse = []
    return replace_statement(text, statement, pruned)


def drop_if_body_statement(text: str) -> str:
    statement = first_node(
        ast.parse(text), lambda node: isinstance(node, ast.If) and len(node.body) >= 2, "if with 2+ statements"
    )
    pruned = copy.deepcopy(statement)
    pruned.body = pruned.body[1:]
    return replace_statement(text, statement, pruned)


def change_positional_default(text: str) -> str:
    default = function_named(ast.parse(text), "get_dataset_num_proc").args.defaults[-1]
    return replace_expression(text, default, "0" if getattr(default, "value", 0) is None else "None")


def change_keyword_only_default(text: str) -> str:
    arguments = function_named(ast.parse(text), "get_dataset_num_proc").args
    default = arguments.kw_defaults[[argument.arg for argument in arguments.kwonlyargs].index("serial_as_none")]
    return replace_expression(text, default, repr(not default.value))


def change_warning_message(text: str) -> str:
    def holds_string(node: ast.AST) -> bool:
        return any(isinstance(inner, ast.Constant) and isinstance(inner.value, str) for inner in ast.walk(node))

    # The message is the first argument; `_parse_or_warn(path, ...)`-style helpers are skipped by that.
    call = first_node(
        ast.parse(text),
        lambda node: (
            isinstance(node, ast.Call)
            and "warn" in call_name(node).lower()
            and node.args
            and holds_string(node.args[0])
        ),
        "warning call with a message string",
    )
    argument = call.args[0]
    changed = copy.deepcopy(argument)
    message = next(
        inner for inner in ast.walk(changed) if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
    )
    message.value = "Reworded: " + message.value
    return replace_expression(text, argument, changed)


def _first_swappable_pair(body: list[ast.stmt]) -> tuple[ast.stmt, ast.stmt] | None:
    start = 1 if body and is_string_statement(body[0]) else 0
    for first, second in zip(body[start:], body[start + 1 :]):
        scoped = (ast.Global, ast.Nonlocal, ast.ImportFrom)
        if not isinstance(first, scoped) and not isinstance(second, scoped) and ast.dump(first) != ast.dump(second):
            return first, second
    return None


def reorder_function_statements(text: str) -> str:
    tree = ast.parse(text)
    function = first_node(
        tree,
        lambda node: isinstance(node, ast.FunctionDef) and _first_swappable_pair(node.body) is not None,
        "function with two swappable statements",
    )
    return swap_adjacent(text, *_first_swappable_pair(function.body))


def reorder_module_constants(text: str) -> str:
    body = ast.parse(text).body

    def is_constant(statement: ast.stmt) -> bool:
        names = (
            [target.id for target in _targets(statement) if isinstance(target, ast.Name)]
            if isinstance(statement, ast.Assign)
            else []
        )
        return bool(names) and all(name.isupper() and not name.startswith("_") for name in names)

    for first, second in zip(body, body[1:]):
        if is_constant(first) and is_constant(second) and ast.dump(first) != ast.dump(second):
            return swap_adjacent(text, first, second)
    pytest.fail("the canonical module has no two adjacent module-level assignments")


def rename_local_variable(text: str) -> str:
    tree = ast.parse(text)

    def local_names(function: ast.FunctionDef) -> list[str]:
        parameters = {argument.arg for argument in ast.walk(function.args) if isinstance(argument, ast.arg)}
        declared = {
            name for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names
        }
        assigned = [
            target.id
            for node in function.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        ]
        return [name for name in assigned if name not in parameters | declared]

    function = first_node(
        tree,
        lambda node: isinstance(node, ast.FunctionDef) and bool(local_names(node)),
        "function with a local variable",
    )
    old_name = local_names(function)[0]
    renamed = copy.deepcopy(function)
    for node in ast.walk(renamed):
        if isinstance(node, ast.Name) and node.id == old_name:
            node.id = old_name + "_renamed"
    return replace_statement(text, function, renamed)


def change_return_value(text: str) -> str:
    tree = ast.parse(text)
    returned = first_node(
        tree, lambda node: isinstance(node, ast.Return) and isinstance(node.value, ast.Constant), "return of a constant"
    ).value
    value = returned.value
    if isinstance(value, bool) or value is None:
        new_value = 0 if value is None else not value
    elif isinstance(value, (int, float)):
        new_value = value + 1
    else:
        new_value = str(value) + "_changed"
    return replace_expression(text, returned, repr(new_value))


def swap_boolean_operator(text: str) -> str:
    operation = first_node(ast.parse(text), lambda node: isinstance(node, ast.BoolOp), "and/or expression")
    swapped = copy.deepcopy(operation)
    swapped.op = ast.Or() if isinstance(operation.op, ast.And) else ast.And()
    return replace_expression(text, operation, swapped)


def change_module_string_constant(text: str) -> str:
    value = module_assignment(ast.parse(text), "NUM_PROC_ENV_VAR").value
    return replace_expression(text, value, repr(value.value + "_V2"))


def delete_module_function(text: str) -> str:
    function = function_named(ast.parse(text), "get_dataset_num_proc")
    return delete_lines(text, _start(function)[0], function.end_lineno)


def add_import(text: str) -> str:
    tree = ast.parse(text)
    # After the docstring and any `from __future__` import, which must stay first.
    anchor = next(
        node
        for node in tree.body[1 if has_docstring(tree) else 0 :]
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    )
    return insert_line_before(text, _start(anchor)[0], "import subprocess")


MEANINGFUL_EDITS = {
    "numeric constant": change_numeric_constant,
    "float constant respelled as an equal int": respell_float_constant_as_int,
    "comparison flipped": flip_comparison,
    "else/elif branch dropped": drop_else_branch,
    "if-body statement dropped": drop_if_body_statement,
    "positional default": change_positional_default,
    "keyword-only default": change_keyword_only_default,
    "warning message": change_warning_message,
    "statements reordered in a function": reorder_function_statements,
    "module constants reordered": reorder_module_constants,
    "local variable renamed": rename_local_variable,
    "return value": change_return_value,
    "and/or swapped": swap_boolean_operator,
    "module string constant": change_module_string_constant,
    "module function deleted": delete_module_function,
    "import added": add_import,
}


# --------------------------------------------------------------------------- edits that keep meaning


def change_docstrings(text: str) -> str:
    tree = ast.parse(text)
    targets = [tree] if has_docstring(tree) else []
    targets.append(
        first_node(tree, lambda node: isinstance(node, ast.FunctionDef) and has_docstring(node), "function docstring")
    )
    # Edit bottom-up so earlier positions stay valid.
    for owner in sorted(targets, key=lambda node: node.body[0].lineno, reverse=True):
        docstring = owner.body[0].value
        text = replace_span(text, docstring, docstring, repr("Rewritten docstring: " + docstring.value[::-1]))
    return text


def remove_function_docstring(text: str) -> str:
    def removable(node: ast.AST) -> bool:
        if not (isinstance(node, ast.FunctionDef) and has_docstring(node) and len(node.body) >= 2):
            return False
        expression = node.body[0]
        line = text.splitlines()[expression.lineno - 1]
        return expression.lineno > node.lineno and not line[: expression.col_offset].strip()

    expression = first_node(ast.parse(text), removable, "function whose docstring has lines of its own").body[0]
    return delete_lines(text, expression.lineno, expression.end_lineno)


def add_function_docstring(text: str) -> str:
    function = first_node(
        ast.parse(text),
        lambda node: (
            isinstance(node, ast.FunctionDef) and not has_docstring(node) and node.body[0].lineno > node.lineno
        ),
        "function without a docstring",
    )
    first = function.body[0]
    return insert_line_before(text, _start(first)[0], " " * first.col_offset + '"""A docstring the twin added."""')


def add_comments(text: str) -> str:
    tree = ast.parse(text)
    cap = module_assignment(tree, "AUTO_NUM_PROC_CAP")
    lines = text.splitlines(keepends=True)
    assert cap.lineno == cap.end_lineno
    lines[cap.lineno - 1] = lines[cap.lineno - 1].rstrip("\r\n") + "  # an inline comment\n"
    text = "".join(lines)
    for statement in reversed(tree.body):
        text = insert_line_before(text, _start(statement)[0], "# a comment line the twin added")
    return text


def remove_comments(text: str) -> str:
    lines = text.splitlines(keepends=True)
    comments = [
        token for token in tokenize.generate_tokens(io.StringIO(text).readline) if token.type == tokenize.COMMENT
    ]
    for token in reversed(comments):
        row, column = token.start
        lines[row - 1] = lines[row - 1][:column].rstrip() + "\n"
    return "".join(lines)


def add_blank_lines(text: str) -> str:
    starts = sorted({_start(node)[0] for node in ast.walk(ast.parse(text)) if isinstance(node, ast.stmt)}, reverse=True)
    for lineno in starts:
        text = insert_line_before(text, lineno, "")
    return text


def swap_quote_style(text: str) -> str:
    """Respell every simple string literal with the other quote character; the values stay identical."""
    swaps = []
    for node in nodes_outside_fstrings(ast.parse(text)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        segment = ast.get_source_segment(text, node)
        for quote, other in (('"', "'"), ("'", '"')):
            if segment == quote + node.value + quote and not set(node.value) & {'"', "'", "\\", "\n"}:
                swaps.append((node, other + node.value + other))
    assert swaps, "no simple string literal found"
    for node, respelled in sorted(swaps, key=lambda pair: (pair[0].lineno, pair[0].col_offset), reverse=True):
        assert ast.literal_eval(respelled) == node.value
        text = replace_span(text, node, node, respelled)
    return text


def reformat_whole_module(text: str) -> str:
    return ast.unparse(ast.parse(text))


def respell_integer_with_underscores(text: str) -> str:
    value = module_assignment(ast.parse(text), "ZOO_MIN_ROWS_FOR_MULTIPROC").value
    return replace_span(text, value, value, f"{value.value:_}")


def parenthesize_constant(text: str) -> str:
    value = module_assignment(ast.parse(text), "AUTO_NUM_PROC_CAP").value
    return replace_expression(text, value, repr(value.value))


def use_crlf_line_endings(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


COSMETIC_EDITS = {
    "docstrings changed": change_docstrings,
    "function docstring removed": remove_function_docstring,
    "function docstring added": add_function_docstring,
    "comments added": add_comments,
    "comments removed": remove_comments,
    "blank lines added": add_blank_lines,
    "quote style swapped": swap_quote_style,
    "whole module reformatted": reformat_whole_module,
    "integer respelled 5_000": respell_integer_with_underscores,
    "redundant parentheses": parenthesize_constant,
    "CRLF line endings": use_crlf_line_endings,
}


# --------------------------------------------------------------------------- running the tool


def run_cli(canonical: Path, twin: Path) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = drift.main(["--canonical", str(canonical), "--twin", str(twin)], stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def write_pair(directory: Path, canonical: str, twin: str) -> tuple[Path, Path]:
    canonical_path, twin_path = directory / "canonical.py", directory / "twin.py"
    canonical_path.write_bytes(canonical.encode("utf-8"))
    twin_path.write_bytes(twin.encode("utf-8"))
    return canonical_path, twin_path


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


# --------------------------------------------------------------------------- tests


def test_there_are_at_least_twelve_distinct_meaningful_edits():
    assert len(MEANINGFUL_EDITS) >= 12


@pytest.mark.parametrize("edit", MEANINGFUL_EDITS.values(), ids=MEANINGFUL_EDITS.keys())
def test_meaningful_edit_is_drift(edit, canonical_text, tmp_path):
    twin_text = edit(canonical_text)
    assert twin_text != canonical_text, "the edit did not change the text"
    ast.parse(twin_text)  # The edited module must still be valid Python, or this tests the parser.

    report = drift.find_drift(canonical_text, twin_text, CANONICAL_NAME, TWIN_NAME)
    assert report is not None
    assert FIX_LINE in report

    code, stdout, stderr = run_cli(*write_pair(tmp_path, canonical_text, twin_text))
    assert code == 1, stderr
    assert FIX_LINE in stdout
    assert "first difference: " in stdout


@pytest.mark.parametrize("edit", COSMETIC_EDITS.values(), ids=COSMETIC_EDITS.keys())
def test_cosmetic_edit_is_not_drift(edit, canonical_text, tmp_path):
    twin_text = edit(canonical_text)
    assert twin_text != canonical_text, "the edit did not change the text"

    assert drift.find_drift(canonical_text, twin_text, CANONICAL_NAME, TWIN_NAME) is None

    code, stdout, stderr = run_cli(*write_pair(tmp_path, canonical_text, twin_text))
    assert (code, stderr) == (0, "")
    assert "matches" in stdout


def test_identical_modules_are_not_drift(canonical_text):
    assert drift.find_drift(canonical_text, canonical_text, CANONICAL_NAME, TWIN_NAME) is None


def test_report_shows_both_sides_of_a_changed_constant(canonical_text):
    report = drift.find_drift(canonical_text, change_numeric_constant(canonical_text), CANONICAL_NAME, TWIN_NAME)

    assert "first difference: AUTO_NUM_PROC_CAP = ..." in report
    lines = report.splitlines()
    assert "-AUTO_NUM_PROC_CAP = 8" in lines
    assert "+AUTO_NUM_PROC_CAP = 9" in lines
    assert f"--- {CANONICAL_NAME} (docstrings stripped)" in lines
    assert f"+++ {TWIN_NAME} (docstrings stripped)" in lines
    assert lines[-1] == FIX_LINE


def test_report_names_the_changed_function_and_shows_its_stripped_source(canonical_text):
    report = drift.find_drift(canonical_text, change_keyword_only_default(canonical_text), CANONICAL_NAME, TWIN_NAME)

    assert "first difference: def get_dataset_num_proc at " in report
    lines = report.splitlines()
    old = [line for line in lines if line.startswith("-def get_dataset_num_proc(")]
    new = [line for line in lines if line.startswith("+def get_dataset_num_proc(")]
    assert len(old) == len(new) == 1
    assert "serial_as_none" in old[0] and "True" in old[0] and "False" not in old[0]
    assert "serial_as_none" in new[0] and "False" in new[0] and "True" not in new[0]
    docstring = ast.get_docstring(function_named(ast.parse(canonical_text), "get_dataset_num_proc"))
    assert docstring and docstring.splitlines()[0] not in report


def test_report_says_which_side_lacks_a_deleted_function(canonical_text):
    report = drift.find_drift(canonical_text, delete_module_function(canonical_text), CANONICAL_NAME, TWIN_NAME)

    assert f"def get_dataset_num_proc at {CANONICAL_NAME}:" in report
    assert f"is missing from {TWIN_NAME}" in report
    assert any(line.startswith("-def get_dataset_num_proc(") for line in report.splitlines())


def test_report_says_which_side_has_an_extra_import(canonical_text):
    report = drift.find_drift(canonical_text, add_import(canonical_text), CANONICAL_NAME, TWIN_NAME)

    assert f"first difference: import subprocess at {TWIN_NAME}:" in report
    assert f"is not in {CANONICAL_NAME}" in report
    assert "+import subprocess" in report.splitlines()


def test_unparseable_twin_exits_2_naming_file_and_line(canonical_text, tmp_path):
    broken = canonical_text + ("" if canonical_text.endswith("\n") else "\n") + "def broken(:\n"
    broken_line = broken.count("\n")
    canonical, twin = write_pair(tmp_path, canonical_text, broken)

    code, stdout, stderr = run_cli(canonical, twin)

    assert code == 2
    assert str(twin) in stderr
    assert f"line {broken_line}" in stderr
    assert stdout == ""


def test_unparseable_canonical_exits_2_naming_it(canonical_text, tmp_path):
    canonical, twin = write_pair(tmp_path, "x = (\n", canonical_text)

    code, _, stderr = run_cli(canonical, twin)

    assert code == 2
    assert str(canonical) in stderr and "line 1" in stderr


@pytest.mark.parametrize("missing", ["canonical", "twin"])
def test_missing_file_exits_2_with_a_message(missing, canonical_text, tmp_path):
    paths = dict(zip(("canonical", "twin"), write_pair(tmp_path, canonical_text, canonical_text)))
    paths[missing].unlink()

    code, _, stderr = run_cli(paths["canonical"], paths["twin"])

    assert code == 2
    assert str(paths[missing]) in stderr and "does not exist" in stderr


def test_unknown_option_exits_2_without_raising_system_exit():
    stderr = io.StringIO()
    assert drift.main(["--no-such-option"], stdout=io.StringIO(), stderr=stderr) == 2
    assert "--no-such-option" in stderr.getvalue()


def test_checking_writes_nothing(canonical_text, tmp_path):
    write_pair(tmp_path, canonical_text, change_numeric_constant(canonical_text))
    before = snapshot(tmp_path)

    code, _, _ = run_cli(tmp_path / "canonical.py", tmp_path / "twin.py")

    assert code == 1
    assert snapshot(tmp_path) == before


def _imported_modules(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return imported | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}


@pytest.mark.parametrize("tool", ["drift.py", "constants_canary.py"])
def test_tool_imports_only_the_standard_library(tool):
    # A tools module it imports (the shared argument parser) is held to the same rule, and so on down.
    pending, seen, outside = [REPO_ROOT / "tools" / tool], set(), set()
    while pending:
        path = pending.pop()
        seen.add(path)
        for name in _imported_modules(path):
            if name.split(".")[0] == "tools":
                module = REPO_ROOT / (name.replace(".", "/") + ".py")
                if module not in seen:
                    pending.append(module)
            elif name.split(".")[0] not in sys.stdlib_module_names | {"__future__"}:
                outside.add(name)
    assert not outside, f"`nox -s drift` installs nothing, yet {tool} imports {sorted(outside)}"


# --------------------------------------------------------------------------- tools/constants_canary.py


CANARY_SAMPLE = '''"""Sample."""
import os
ROWS = 5000
CAP: int = 8
RATIO = -0.5
NAME = 'worker'
PAIR = (1, "two")
A = B = 3
COMPUTED = os.cpu_count()
LATER_COMPUTED = 1
LATER_COMPUTED = len("abc")
LATER_LITERAL = len("abc")
LATER_LITERAL = 4
BUMPED = 1
BUMPED += 1
CONDITIONAL = 1
if os.name == "nt":
    CONDITIONAL = 2
ANNOTATED_ONLY: int
os = "shadowed later"
import os


def helper():
    INSIDE = 7
    return INSIDE
'''


def test_canary_reads_module_level_literals_without_importing(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text(CANARY_SAMPLE + "raise SystemExit('importing this module is a bug')\n", encoding="utf-8")

    assert constants_canary.read_literal_constants(path) == {
        "ROWS": 5000,
        "CAP": 8,
        "RATIO": -0.5,
        "NAME": "worker",
        "PAIR": (1, "two"),
        "A": 3,
        "B": 3,
        "LATER_LITERAL": 4,
    }


def test_canary_keeps_int_and_float_apart(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text("WHOLE = 1\nFLOATING = 1.0\n", encoding="utf-8")

    constants = constants_canary.read_literal_constants(path)

    assert type(constants["WHOLE"]) is int and type(constants["FLOATING"]) is float


def test_canary_reads_the_anchor_constants_of_the_real_module():
    constants = constants_canary.read_literal_constants(CANONICAL_PATH)

    expected_types = {
        "NUM_PROC_ENV_VAR": str,
        "AUTO_NUM_PROC_CAP": int,
        "WORKER_MEMORY_BUDGET_GB": float,
        "MEMORY_BUDGET_FRACTION": float,
        "ZOO_MIN_ROWS_FOR_MULTIPROC": int,
        "CGROUP_ROOT": str,
        "PROC_SELF_CGROUP": str,
    }
    assert {name: type(constants.get(name)) for name in expected_types} == expected_types


def test_canary_cli_prints_constants_and_rejects_bad_input(tmp_path):
    good, broken = tmp_path / "good.py", tmp_path / "broken.py"
    good.write_text("CAP = 8\nNAME = 'x'\n", encoding="utf-8")
    broken.write_text("CAP = (\n", encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()

    assert constants_canary.main([str(good)], stdout=stdout, stderr=stderr) == 0
    assert stdout.getvalue() == "CAP = 8\nNAME = 'x'\n"
    assert constants_canary.main([str(broken)], stdout=stdout, stderr=stderr) == 2
    assert constants_canary.main([str(tmp_path / "absent.py")], stdout=stdout, stderr=stderr) == 2
    assert constants_canary.main([], stdout=stdout, stderr=stderr) == 2
    assert str(broken) in stderr.getvalue() and "line 1" in stderr.getvalue()
