"""Evaluate the worker-count policy on every cell of a simulated host matrix and check its invariants.

`python tools/host_matrix.py [--quick] [--policy-path DIR]`: exit 0 when no cell breaks an invariant,
1 when any does (the first failing cells are printed), 2 on bad arguments or an import from the wrong place.
Only the operating system's answers are faked (tools/kits/fake_host.py); every answer comes from the real policy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))

from tools.cli import Parser, UsageError  # noqa: E402
from tools.host_matrix_cells import FULL_AXES, GIB, QUICK_AXES, cgroup_spec  # noqa: E402
from tools.host_matrix_run import (  # noqa: E402
    INVARIANTS,
    FailedCell,
    MatrixResult,
    TargetError,
    Targets,
    load_targets,
    run_matrix,
)

# tmpfs keeps the policy's many small cgroup reads off the disk.
FAST_TREE_PARENT = "/dev/shm"


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


# ---- the report: the summary table, then the first failing cells with their inputs and answers


def _gib(value: Any) -> str:
    return "unreadable" if value is None else f"{value:g} GiB"


def _bytes(value: Any) -> str:
    return "unknown" if value is None else f"{value / GIB:.2f} GiB"


def write_summary(out: TextIO, targets: Targets, result: MatrixResult, warnings: int, axes_name: str) -> None:
    tally = result.tally
    out.write(
        f"host matrix ({axes_name} axes): {result.cells:,} cells evaluated "
        f"({result.hosts:,} hosts x {result.cells // max(result.hosts, 1)} asks) in {result.seconds:.1f} s\n"
    )
    out.write(f"policy  {targets.policy.__name__} from {targets.policy.__file__}\n")
    out.write(f"twin    {targets.twin.__name__} from {targets.twin.__file__}\n")
    if targets.studio is None:
        out.write(f"studio  skipped: {targets.studio_skip_reason}\n")
    else:
        caps = ", ".join(
            f"{name}={'not published, unchecked' if value is None else value}"
            for name, value in targets.studio_caps().items()
        )
        origin = getattr(targets.studio_module, "__file__", "?")
        out.write(f"studio  {targets.studio.__module__}.{targets.studio.__name__} from {origin} (caps: {caps})\n")
    out.write(f"cgroup trees written: {result.cgroup_trees}; policy warnings routed to a counter: {warnings:,}\n\n")
    width = max(len(name) for name, _ in INVARIANTS)
    out.write(f"{'invariant'.ljust(width)}  {'checked':>9}  {'violations':>10}\n")
    for name, _ in INVARIANTS:
        checked = tally.checked[name]
        shown = f"{checked:>9,}" if checked else f"{'skipped':>9}"
        out.write(f"{name.ljust(width)}  {shown}  {tally.violations[name]:>10,}\n")
    verdict = "PASS" if tally.total_violations == 0 else "FAIL"
    out.write(f"\n{verdict}: {tally.total_violations:,} violations\n")


def write_failures(out: TextIO, result: MatrixResult) -> None:
    if not result.failures:
        return
    descriptions = dict(INVARIANTS)
    out.write(f"\nfirst {len(result.failures)} failing cells:\n")
    for number, failure in enumerate(result.failures, 1):
        out.write(_describe(f"#{number}", failure))
    shown = {name for failure in result.failures for name in failure.invariants}
    unshown = [name for name in result.first_by_invariant if name not in shown]
    if unshown:
        out.write("\nfirst cell breaking each invariant not shown above:\n")
        for name in unshown:
            out.write(_describe(f"first {name}", result.first_by_invariant[name]))
    out.write("\nbroken invariants:\n")
    for name in (name for name, _ in INVARIANTS if name in result.first_by_invariant):
        out.write(f"  {name}: {descriptions[name]}\n")


def _describe(label: str, failure: FailedCell) -> str:
    cell, truth, answers = failure.cell, failure.truth, failure.answers
    decision = answers.decision
    spec = cgroup_spec(cell)
    decided_by = "?" if decision is None else decision.decided_by
    studio = answers.studio if answers.studio_error is None else f"raised {answers.studio_error}"
    lines = [
        f"{label} broke: {', '.join(failure.invariants)}",
        f"   host:   platform={cell.platform} multiprocess={cell.multiprocess_method} stdlib={cell.stdlib_method} "
        f"pinned={cell.method_pinned} cpus={cell.usable_cpus} (by {cell.cpu_binding}) memory={_gib(cell.memory_gb)} "
        f"(by {cell.memory_binding}) cgroup={'none' if spec is None else spec.version} "
        f"ranks={cell.local_ranks} hatch={cell.hatch!r}",
        f"   ask:    request={failure.request.label} ({failure.request.kind}) layer={failure.layer}",
        f"   truth:  start method={truth.start_method} workers possible={truth.workers_possible} "
        f"usable cpus={truth.usable_cpus} available={_bytes(truth.available_bytes)} "
        f"affordable per rank={truth.affordable_per_rank} for the host={truth.affordable_host}",
        f"   got:    value={answers.value!r} (decided by {decided_by}) "
        f"twin={None if answers.twin_decision is None else answers.twin_decision.value!r} "
        f"responses-only={answers.responses!r} studio={studio!r}",
    ]
    if answers.error is not None:
        lines.append(f"   raised: {answers.error}")
    if decision is not None:
        lines.extend(f"   step:   {step.count!r}: {step.reason}" for step in decision.steps)
    return "\n".join(lines) + "\n"


def _build_parser() -> Parser:
    parser = Parser(prog="host_matrix.py", description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this message and exit")
    parser.add_argument("--quick", action="store_true", help="a reduced axis set, for tests")
    parser.add_argument(
        "--policy-path", type=Path, default=None, help="import unsloth_zoo (and unsloth) from here first"
    )
    return parser


def _tree_parent() -> Optional[str]:
    return FAST_TREE_PARENT if os.access(FAST_TREE_PARENT, os.W_OK) else None


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    parser = _build_parser()
    try:
        options = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except UsageError as error:
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
