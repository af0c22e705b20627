"""Evaluate the worker-count policy on every cell of a simulated host matrix and check its invariants.

`python tools/host_matrix.py [--quick] [--policy-path DIR]`: exit 0 when no cell breaks an invariant,
1 when any does (the first failing cells are printed), 2 on bad arguments or an import from the wrong place.
Only the operating system's answers are faked (tools/fake_host.py); every answer comes from the real policy.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Sequence, TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))

from tools.host_matrix_axes import FULL_AXES, QUICK_AXES  # noqa: E402
from tools.host_matrix_engine import run_matrix  # noqa: E402
from tools.host_matrix_report import write_failures, write_summary  # noqa: E402
from tools.host_matrix_targets import TargetError, load_targets  # noqa: E402

# tmpfs keeps the policy's many small cgroup reads off the disk.
FAST_TREE_PARENT = "/dev/shm"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    # argparse would call sys.exit on bad arguments; raising keeps main() the only place that decides.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


class _CountingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextlib.contextmanager
def warnings_counted(logger_names: Sequence[str]) -> Iterator[_CountingHandler]:
    """Route the evaluated modules' log records to a counter, so a quarter-million cells print no noise."""
    handler = _CountingHandler()
    saved = []
    for name in logger_names:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate, logger.level))
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        for logger, handlers, propagate, level in saved:
            logger.handlers = handlers
            logger.propagate = propagate
            logger.setLevel(level)


def _build_parser() -> _Parser:
    parser = _Parser(prog="host_matrix.py", description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this message and exit")
    parser.add_argument("--quick", action="store_true", help="a reduced axis set, for tests")
    parser.add_argument("--policy-path", type=Path, default=None, help="import unsloth_zoo (and unsloth) from here first")
    return parser


def _tree_parent() -> Optional[str]:
    return FAST_TREE_PARENT if os.access(FAST_TREE_PARENT, os.W_OK) else None


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    parser = _build_parser()
    try:
        options = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except _UsageError as error:
        out.write(f"{parser.format_usage()}host_matrix: {error}\n")
        return 2
    if options.help:
        out.write(parser.format_help())
        return 0
    try:
        targets = load_targets(options.policy_path)
    except TargetError as error:
        out.write(f"host_matrix: {error}\n")
        return 2
    axes = QUICK_AXES if options.quick else FULL_AXES
    with tempfile.TemporaryDirectory(prefix="host_matrix_", dir=_tree_parent()) as tree_root:
        with warnings_counted(targets.logger_names()) as warnings:
            result = run_matrix(targets, axes, Path(tree_root))
    write_summary(out, targets, result, warnings.count, "quick" if options.quick else "full")
    write_failures(out, result)
    return 0 if result.tally.total_violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
