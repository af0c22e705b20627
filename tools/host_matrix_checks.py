"""The invariants every matrix cell must satisfy, each judged against the cell's own truth."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from tools.host_matrix_axes import HostCell, Request
from tools.host_matrix_truth import HostTruth

INVARIANTS: Tuple[Tuple[str, str], ...] = (
    ("raises_nothing", "no policy entry point raises"),
    ("typed", "the value is None or an int >= 1: never 0, negative, bool or float"),
    ("map_never_1", "a map site never gets 1"),
    ("config_never_none_while_forking", "a config never gets None where forking works"),
    ("no_workers_without_fork", "no workers without a believable fork, nor on macOS (hatch aside)"),
    ("memory_covers_workers", "workers <= what this rank's memory share covers (hatch aside)"),
    ("ranks_share_host_memory", "ranks x workers <= what the whole host's memory covers (hatch aside)"),
    ("auto_capped", "auto-sizing never exceeds AUTO_NUM_PROC_CAP"),
    ("auto_within_cpus", "auto-sizing: ranks x workers <= usable CPUs"),
    ("hatch_obeyed", "hatch n>=2 returned exactly; serial words give the layer's in-process value; garbage = unset"),
    ("deterministic", "the same cell asked twice gives the same record"),
    ("record_matches_value", "explain().value == get_dataset_num_proc()"),
    ("record_tells_truth", "the record's layer, start method, CPUs, memory and ranks are the cell's"),
    ("twins_agree", "unsloth's twin gives the same value and decision record"),
    ("responses_only_typed", "responses-only: None or int >= 1; serial is 1 exactly where a large split can fork"),
    ("responses_only_matches_policy", "responses-only: the policy's workers, except auto on small splits"),
    ("studio_runs", "Studio's dataset_map_num_proc does not raise"),
    ("studio_typed", "Studio: None or an int >= 1, never 0, never 1 at a map site"),
    ("studio_within_caps", "Studio: auto <= its cap, <= its multi-GPU cap with several GPUs, <= the policy (hatch aside)"),
)
INVARIANT_NAMES = tuple(name for name, _ in INVARIANTS)


@dataclasses.dataclass
class Answers:
    """What every entry point said for one cell; `error` is set when a policy call raised."""

    value: Any = None
    decision: Any = None
    repeat: Any = None
    twin_decision: Any = None
    responses: Any = None
    large_splits: bool = False
    studio: Any = None
    studio_error: Optional[str] = None
    error: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Context:
    """Everything about a cell the checks read that is not an answer."""

    cell: HostCell
    truth: HostTruth
    layer: str
    request: Request
    auto_cap: int
    unset_value: Any  # the same ask on the same host with the hatch unset
    studio_evaluated: bool
    studio_auto_cap: Optional[int]
    studio_multi_gpu_cap: Optional[int]


_HOST_FIELDS: Dict[type, Tuple[str, ...]] = {}


def record_key(decision: Any) -> tuple:
    """A decision record as plain values, so records from the two twins' distinct classes compare."""
    host = decision.host
    names = _HOST_FIELDS.get(type(host))
    if names is None:
        names = _HOST_FIELDS.setdefault(type(host), tuple(field.name for field in dataclasses.fields(host)))
    return (
        decision.value,
        type(decision.value),
        decision.layer,
        decision.requested,
        decision.request_kind,
        decision.rows,
        decision.decided_by,
        tuple(getattr(host, name) for name in names),
        tuple((step.count, step.reason) for step in decision.steps),
    )


def is_well_typed(value: Any) -> bool:
    return value is None or (type(value) is int and value >= 1)


def workers_of(value: Any) -> float:
    """The worker processes a value would start: any number >= 2, else 0 (a float still counts, to be caught)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value if value >= 2 else 0


def same(first: Any, second: Any) -> bool:
    return first == second and type(first) is type(second)


class Tally:
    """Counts, per invariant, the cells it applied to and the cells that broke it."""

    def __init__(self) -> None:
        self.checked = dict.fromkeys(INVARIANT_NAMES, 0)
        self.violations = dict.fromkeys(INVARIANT_NAMES, 0)

    def judge(self, failed: List[str], name: str, holds: bool) -> None:
        self.checked[name] += 1
        if not holds:
            self.violations[name] += 1
            failed.append(name)

    @property
    def total_violations(self) -> int:
        return sum(self.violations.values())


def check_cell(tally: Tally, context: Context, answers: Answers) -> List[str]:
    """Judge one cell; returns the names of the invariants it broke."""
    failed: List[str] = []
    tally.judge(failed, "raises_nothing", answers.error is None)
    if answers.error is None:
        _check_policy(tally, failed, context, answers)
        _check_records(tally, failed, context, answers)
        _check_responses_only(tally, failed, context, answers)
    if context.studio_evaluated:
        _check_studio(tally, failed, context, answers)
    return failed


def _check_policy(tally: Tally, failed: List[str], context: Context, answers: Answers) -> None:
    truth, value, layer = context.truth, answers.value, context.layer
    workers = workers_of(value)
    tally.judge(failed, "typed", is_well_typed(value))
    if layer == "map":
        tally.judge(failed, "map_never_1", value != 1)
    elif truth.workers_possible:
        tally.judge(failed, "config_never_none_while_forking", value is not None)

    if truth.hatch_kind == "workers":
        tally.judge(failed, "hatch_obeyed", same(value, truth.hatch_count))
    elif truth.hatch_kind == "serial":
        tally.judge(failed, "hatch_obeyed", same(value, truth.in_process_value(layer)))
    elif truth.hatch_kind == "garbage":
        tally.judge(failed, "hatch_obeyed", same(value, context.unset_value))
    if truth.hatch_decides:
        return

    tally.judge(failed, "no_workers_without_fork", truth.workers_possible or workers == 0)
    if truth.available_bytes is not None:
        tally.judge(failed, "memory_covers_workers", workers <= truth.affordable_per_rank)
        tally.judge(failed, "ranks_share_host_memory", context.cell.local_ranks * workers <= truth.affordable_host)
    if context.request.kind == "auto":
        tally.judge(failed, "auto_capped", workers <= context.auto_cap)
        tally.judge(failed, "auto_within_cpus", context.cell.local_ranks * workers <= truth.usable_cpus)


def _check_records(tally: Tally, failed: List[str], context: Context, answers: Answers) -> None:
    decision = answers.decision
    key = record_key(decision)
    tally.judge(failed, "deterministic", key == record_key(answers.repeat))
    tally.judge(failed, "record_matches_value", same(decision.value, answers.value))
    host, truth, cell = decision.host, context.truth, context.cell
    tally.judge(
        failed,
        "record_tells_truth",
        decision.layer == context.layer
        and host.platform == cell.platform
        and host.start_method == truth.start_method
        and host.workers_usable == truth.workers_possible
        and host.usable_cpus == truth.usable_cpus
        and host.available_memory_bytes == truth.available_bytes
        and host.local_ranks == cell.local_ranks,
    )
    tally.judge(failed, "twins_agree", key == record_key(answers.twin_decision))


def _check_responses_only(tally: Tally, failed: List[str], context: Context, answers: Answers) -> None:
    value = answers.responses
    # Serial is 1 only where the zoo could re-inflate a None: a large split on a host that can fork.
    encoding_ok = value is not None if answers.large_splits and context.truth.workers_possible else value != 1
    tally.judge(failed, "responses_only_typed", is_well_typed(value) and encoding_ok)
    expected = workers_of(answers.value)
    # A small job asked to auto-size stays in-process, whatever the host allows.
    if not answers.large_splits and context.request.kind == "auto" and not context.truth.hatch_decides:
        expected = 0
    tally.judge(failed, "responses_only_matches_policy", workers_of(value) == expected)


def _check_studio(tally: Tally, failed: List[str], context: Context, answers: Answers) -> None:
    tally.judge(failed, "studio_runs", answers.studio_error is None)
    if answers.studio_error is not None:
        return
    value = answers.studio
    tally.judge(failed, "studio_typed", is_well_typed(value) and not (context.layer == "map" and value == 1))
    if context.truth.hatch_decides or answers.error is not None:
        return
    ceilings = [workers_of(answers.value)]
    if context.request.kind == "auto" and context.studio_auto_cap is not None:
        ceilings.append(context.studio_auto_cap)
    # One GPU is visible per local rank in every cell.
    if context.cell.local_ranks > 1 and context.studio_multi_gpu_cap is not None:
        ceilings.append(context.studio_multi_gpu_cap)
    tally.judge(failed, "studio_within_caps", workers_of(value) <= min(ceilings))
