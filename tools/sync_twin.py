"""Generate unsloth's copy of the dataset worker-count policy from the zoo's canonical module.

The copy is the source byte for byte, except that the zoo's license header is swapped for
unsloth's plus a "generated file" banner. `nox -s sync` writes it; `nox -s sync -- --check`
only reports whether it is stale.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence, TextIO

import libcst as cst

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))

from tools.cli import Parser, UsageError  # noqa: E402

SOURCE_RELPATH = "zoo/unsloth_zoo/dataset_num_proc.py"
TARGET_RELPATH = "unsloth/unsloth/dataset_num_proc.py"
SYNC_COMMAND = "nox -s sync"

SOURCE_HEADER = (
    "# SPDX-License-Identifier: LGPL-3.0-or-later",
    "# Copyright 2026 the unsloth_zoo authors.",
)
TWIN_HEADER = (
    "# SPDX-License-Identifier: Apache-2.0",
    "# Copyright 2026 the unsloth authors.",
    "#",
    "# GENERATED FILE: DO NOT EDIT.",
    f"# Generated from {SOURCE_RELPATH} by `{SYNC_COMMAND}`.",
    f"# Edit that source instead, then rerun `{SYNC_COMMAND}` to refresh this copy.",
)


class MissingLicenseHeader(ValueError):
    """The source does not open with the zoo's license header, so there is nothing safe to replace."""


def render_twin(source_text: str) -> str:
    """Return the twin's text: the source with its license header swapped for unsloth's header and banner."""
    module = cst.parse_module(source_text)
    header = list(module.header)
    if not _starts_with_comments(header, SOURCE_HEADER):
        expected = "\n".join(SOURCE_HEADER)
        raise MissingLicenseHeader(f"the source must start with exactly these comment lines:\n{expected}")
    twin_header = [cst.EmptyLine(comment=cst.Comment(line)) for line in TWIN_HEADER]
    return module.with_changes(header=twin_header + header[len(SOURCE_HEADER) :]).code


def _starts_with_comments(header: list[cst.EmptyLine], lines: Sequence[str]) -> bool:
    if len(header) < len(lines):
        return False
    return all(
        line.comment is not None and line.comment.value == expected and not line.whitespace.value
        for line, expected in zip(header, lines)
    )


def describe_staleness(current_text: str, wanted_text: str, target_label: str, source_label: str) -> str:
    """Return a unified diff from the twin on disk to the twin the source would generate, plus the fix."""
    diff = difflib.unified_diff(
        current_text.splitlines(),
        wanted_text.splitlines(),
        fromfile=f"{target_label} (on disk)",
        tofile=f"{target_label} (as generated from {source_label})",
        lineterm="",
    )
    return "\n".join(diff) + f"\nrun `{SYNC_COMMAND}` to regenerate {target_label} from {source_label}\n"


def display_path(path: Path) -> str:
    """Name a path relative to the repository when it lies inside it, so messages match the docs."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def read_text_exactly(path: Path) -> str:
    """Read UTF-8 text without newline translation, so CRLF files survive byte for byte."""
    return path.read_bytes().decode("utf-8")


def write_atomically(path: Path, text: str, mode_from: Path) -> None:
    """Replace `path` in one step, so a reader never sees a half-written twin."""
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        shutil.copymode(mode_from, temp_name)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def _build_parser() -> Parser:
    parser = Parser(
        prog="sync_twin.py",
        description=f"Regenerate {TARGET_RELPATH} from {SOURCE_RELPATH}.",
        add_help=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this message and exit")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if the copy is stale")
    parser.add_argument("--source", type=Path, default=REPO_ROOT / SOURCE_RELPATH, help="canonical module")
    parser.add_argument("--target", type=Path, default=REPO_ROOT / TARGET_RELPATH, help="generated copy")
    return parser


def _render_source(source: Path, source_label: str, stderr: TextIO) -> str | None:
    if not source.is_file():
        stderr.write(f"sync_twin: source {source_label} does not exist\n")
        return None
    source_text = read_text_exactly(source)
    try:
        # ast gives exact line numbers for syntax errors; libcst's are coarser.
        ast.parse(source_text, filename=source_label)
        return render_twin(source_text)
    except SyntaxError as error:
        stderr.write(f"sync_twin: cannot parse {source_label}, line {error.lineno}: {error.msg}\n")
    except cst.ParserSyntaxError as error:
        stderr.write(f"sync_twin: cannot parse {source_label}, line {error.raw_line}: {error.message}\n")
    except MissingLicenseHeader as error:
        stderr.write(f"sync_twin: {source_label}: {error}\n")
    return None


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Sync (or with --check, verify) the twin; 0 up to date or written, 1 stale under --check, 2 bad input."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _build_parser()
    try:
        options = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except UsageError as error:
        stderr.write(f"{parser.format_usage()}sync_twin: {error}\n")
        return 2
    if options.help:
        stdout.write(parser.format_help())
        return 0

    source, target = options.source, options.target
    source_label, target_label = display_path(source), display_path(target)
    wanted = _render_source(source, source_label, stderr)
    if wanted is None:
        return 2
    current = read_text_exactly(target) if target.is_file() else None

    if current == wanted:
        stdout.write(f"{target_label} is up to date with {source_label}\n")
        return 0
    if options.check and current is None:
        stdout.write(f"{target_label} does not exist\nrun `{SYNC_COMMAND}` to generate it from {source_label}\n")
        return 1
    if options.check:
        stdout.write(describe_staleness(current, wanted, target_label, source_label))
        return 1
    if not target.parent.is_dir():
        stderr.write(f"sync_twin: directory {display_path(target.parent)} does not exist\n")
        return 2
    write_atomically(target, wanted, mode_from=target if current is not None else source)
    stdout.write(f"wrote {target_label} from {source_label}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
