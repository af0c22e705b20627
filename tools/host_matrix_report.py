"""Print a matrix run: the summary table, then the first failing cells with their inputs and answers."""

from __future__ import annotations

from typing import Any, TextIO

from tools.host_matrix_axes import cgroup_spec
from tools.host_matrix_checks import INVARIANTS
from tools.host_matrix_engine import FailedCell, MatrixResult
from tools.host_matrix_targets import Targets
from tools.host_matrix_truth import GIB


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
