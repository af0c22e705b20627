"""Walk the host matrix: fake each host's operating system, ask every entry point, judge every cell."""

from __future__ import annotations

import dataclasses
import time
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tools.fake_host import CgroupSpec, Patcher, apply_host
from tools.host_matrix_axes import LAYERS, Axes, HostCell, Request, cgroup_spec, host_cells, host_profile
from tools.host_matrix_checks import Answers, Context, Tally, check_cell
from tools.host_matrix_targets import STUDIO_AUTO_CAP, STUDIO_MULTI_GPU_CAP, Targets
from tools.host_matrix_truth import Budget, HostTruth, host_truth

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
