"""Run the host matrix: import what it evaluates (the zoo policy, unsloth's twin, Studio's wrapper when it
exists), fake each host's operating system, ask every entry point, and judge every cell against the invariants.

`--policy-path` puts a directory first on sys.path, so a mutated copy of the packages is what gets
imported; the import is then checked to have come from there.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from tools.host_matrix_cells import (
    LAYERS,
    Axes,
    Budget,
    HostCell,
    HostTruth,
    Request,
    cgroup_spec,
    host_cells,
    host_profile,
    host_truth,
)
from tools.kits.fake_host import CgroupSpec, Patcher, apply_host

POLICY_MODULE = "unsloth_zoo.dataset_num_proc"
TWIN_MODULE = "unsloth.dataset_num_proc"
STUDIO_PACKAGE = "unsloth_studio"
STUDIO_FUNCTION = "dataset_map_num_proc"
# Studio's ceilings: on auto-sizing, and on any count while several GPUs (one rank each) are visible.
STUDIO_AUTO_CAP = "STUDIO_NUM_PROC_CAP"
STUDIO_MULTI_GPU_CAP = "MULTI_GPU_NUM_PROC_CAP"
STUDIO_CAP_NAMES = (STUDIO_AUTO_CAP, STUDIO_MULTI_GPU_CAP)
# Studio reaches the policy through this module, which logs when no policy loads.
STUDIO_POLICY_LOADER = "unsloth_num_proc"


class TargetError(Exception):
    """The modules to evaluate could not be imported from where they were asked for."""


@dataclasses.dataclass(frozen=True)
class Targets:
    policy: types.ModuleType
    twin: types.ModuleType
    studio: Optional[Callable]
    studio_module: Optional[types.ModuleType]
    studio_skip_reason: Optional[str]

    @property
    def policy_modules(self) -> tuple:
        return (self.policy, self.twin)

    def studio_caps(self) -> Dict[str, Optional[int]]:
        """Studio's published caps by name; None for one the package does not (or no longer) publish."""
        package = sys.modules.get(STUDIO_PACKAGE) if self.studio is not None else None
        caps = {}
        for name in STUDIO_CAP_NAMES:
            value = getattr(package, name, None)
            caps[name] = value if type(value) is int else None
        return caps

    def logger_names(self) -> tuple:
        names = [self.policy.__name__, self.twin.__name__]
        if self.studio_module is not None:
            names.extend((STUDIO_PACKAGE, STUDIO_POLICY_LOADER))
        return tuple(names)


def _is_inside(module: types.ModuleType, directory: Path) -> bool:
    origin = getattr(module, "__file__", None)
    return origin is not None and Path(origin).resolve().is_relative_to(directory.resolve())


def _import_studio() -> tuple:
    try:
        package = importlib.import_module(STUDIO_PACKAGE)
        function = getattr(package, STUDIO_FUNCTION)
    except Exception as error:  # any failure to import means Studio cannot be evaluated, not that the run fails
        return None, None, f"not importable ({type(error).__name__}: {error})"
    return function, sys.modules.get(getattr(function, "__module__", ""), package), None


def load_targets(policy_path: Optional[Path] = None) -> Targets:
    if policy_path is not None:
        if not policy_path.is_dir():
            raise TargetError(f"--policy-path {policy_path} is not a directory")
        sys.path.insert(0, str(policy_path.resolve()))
    try:
        policy = importlib.import_module(POLICY_MODULE)
        twin = importlib.import_module(TWIN_MODULE)
    except ImportError as error:
        raise TargetError(f"cannot import the policy: {error}") from error
    if policy_path is not None:
        if not _is_inside(policy, policy_path):
            raise TargetError(f"{POLICY_MODULE} came from {policy.__file__}, not from --policy-path {policy_path}")
        # A twin copy under the path is used too; without one, the installed twin is compared.
        if (policy_path / "unsloth").is_dir() and not _is_inside(twin, policy_path):
            raise TargetError(f"{TWIN_MODULE} came from {twin.__file__}, not from --policy-path {policy_path}")
    studio, studio_module, reason = _import_studio()
    return Targets(policy, twin, studio, studio_module, reason)


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
    (
        "studio_within_caps",
        "Studio: auto <= its cap, <= its multi-GPU cap with several GPUs, <= the policy (hatch aside)",
    ),
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


# Row counts far on either side of the zoo's multiprocessing threshold, so either trainer is unambiguous.
# Large enough that rows never bound auto below the cap of 8 (8 x AUTO_MIN_ROWS_PER_WORKER).
LARGE_TRAINER = types.SimpleNamespace(train_dataset=[None] * 40_000, eval_dataset=[None] * 500)
SMALL_TRAINER = types.SimpleNamespace(train_dataset=[None] * 300, eval_dataset=[None] * 30)
FAILURES_SHOWN = 10


@dataclasses.dataclass(frozen=True)
class FailedCell:
    cell: HostCell
    truth: HostTruth
    layer: str
    request: Request
    answers: Answers
    invariants: Tuple[str, ...]


@dataclasses.dataclass
class MatrixResult:
    tally: Tally
    cells: int = 0
    hosts: int = 0
    seconds: float = 0.0
    cgroup_trees: int = 0
    failures: List[FailedCell] = dataclasses.field(default_factory=list)
    # The first cell to break each invariant, so one broken late in the walk still gets an example.
    first_by_invariant: Dict[str, FailedCell] = dataclasses.field(default_factory=dict)


class TreeCache:
    """One cgroup tree on disk per distinct spec, reused by every host that sits in the same cgroup."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: Dict[Optional[CgroupSpec], Path] = {}

    def path_for(self, spec: Optional[CgroupSpec]) -> Path:
        if spec not in self.paths:
            self.paths[spec] = self.root / f"tree{len(self.paths)}"
        return self.paths[spec]


def ask(targets: Targets, request: Request, layer: str) -> Answers:
    """Every entry point's answer to one request at one layer, on the host currently faked."""
    answers = Answers(large_splits=layer == "map")
    serial_as_none = layer == "map"
    # The layer axis means nothing to responses-only, so its slot carries the trainer size instead.
    trainer = LARGE_TRAINER if answers.large_splits else SMALL_TRAINER
    policy, twin = targets.policy, targets.twin
    try:
        answers.value = policy.get_dataset_num_proc(request.value, serial_as_none=serial_as_none)
        answers.decision = policy.explain_dataset_num_proc(request.value, serial_as_none=serial_as_none)
        answers.repeat = policy.explain_dataset_num_proc(request.value, serial_as_none=serial_as_none)
        answers.twin_decision = twin.explain_dataset_num_proc(request.value, serial_as_none=serial_as_none)
        answers.responses = policy.resolve_responses_only_num_proc(trainer, request.value)
    except Exception as error:  # a raising policy is a violation to report, not a reason to stop the run
        answers.error = f"{type(error).__name__}: {error}"
    if targets.studio is not None:
        try:
            answers.studio = targets.studio(request.value, serial_as_none=serial_as_none)
        except Exception as error:  # same for Studio
            answers.studio_error = f"{type(error).__name__}: {error}"
    return answers


def record_failure(result: MatrixResult, failure: FailedCell) -> None:
    if len(result.failures) < FAILURES_SHOWN:
        result.failures.append(failure)
    for name in failure.invariants:
        result.first_by_invariant.setdefault(name, failure)


def run_matrix(targets: Targets, axes: Axes, tree_root: Path) -> MatrixResult:
    policy = targets.policy
    budget = Budget(policy.MEMORY_BUDGET_FRACTION, policy.WORKER_MEMORY_BUDGET_GB)
    auto_cap = policy.AUTO_NUM_PROC_CAP
    studio_caps = targets.studio_caps()
    trees = TreeCache(tree_root)
    result = MatrixResult(tally=Tally())
    unset_values: Dict[Tuple[str, int], Any] = {}
    started = time.perf_counter()
    for cell in host_cells(axes):
        if cell.hatch is None:
            unset_values.clear()
        truth = host_truth(cell, budget)
        patch = Patcher()
        try:
            apply_host(patch, host_profile(cell), trees.path_for(cgroup_spec(cell)), targets.policy_modules)
            for layer in LAYERS:
                for index, request in enumerate(axes.requests):
                    answers = ask(targets, request, layer)
                    if cell.hatch is None:
                        unset_values[(layer, index)] = answers.value
                    context = Context(
                        cell=cell,
                        truth=truth,
                        layer=layer,
                        request=request,
                        auto_cap=auto_cap,
                        unset_value=unset_values.get((layer, index)),
                        studio_evaluated=targets.studio is not None,
                        studio_auto_cap=studio_caps.get(STUDIO_AUTO_CAP),
                        studio_multi_gpu_cap=studio_caps.get(STUDIO_MULTI_GPU_CAP),
                    )
                    failed = check_cell(result.tally, context, answers)
                    result.cells += 1
                    if failed:
                        record_failure(result, FailedCell(cell, truth, layer, request, answers, tuple(failed)))
        finally:
            patch.undo()
        result.hosts += 1
    result.seconds = time.perf_counter() - started
    result.cgroup_trees = len(trees.paths)
    return result
