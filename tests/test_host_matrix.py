"""The host-matrix tool: it passes on the real policy, and names the invariant a one-line mutation breaks.

Mutants are copies of the policy (and of its twin) in tmp_path, imported first through `--policy-path`
by a subprocess, so the real modules in this process are never touched.
"""

from __future__ import annotations

import io
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Tuple

import pytest

from tools import host_matrix
from tools.host_matrix_cells import (
    FULL_AXES,
    GIB,
    HATCH_MEANINGS,
    HATCHES,
    QUICK_AXES,
    Budget,
    HostCell,
    available_bytes,
    believable_start_method,
    host_cells,
    host_truth,
    planned_cells,
    usable_cpus,
)
from tools.host_matrix_run import INVARIANT_NAMES

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOL = REPO_ROOT / "tools" / "host_matrix.py"
POLICY_SOURCE = REPO_ROOT / "zoo" / "unsloth_zoo"
TWIN_SOURCE = REPO_ROOT / "unsloth" / "unsloth" / "dataset_num_proc.py"
BUDGET = Budget(memory_fraction=0.5, worker_gb=1.0)


def violations_by_invariant(output: str) -> dict:
    """The summary table's violation counts, by invariant name."""
    counts = {}
    for line in output.splitlines():
        match = re.fullmatch(r"(\w+)\s+(?:[\d,]+|skipped)\s+([\d,]+)", line.strip())
        if match and match.group(1) in INVARIANT_NAMES:
            counts[match.group(1)] = int(match.group(2).replace(",", ""))
    return counts


def linux_cell(**fields) -> HostCell:
    values = dict(
        platform="linux",
        multiprocess_method="fork",
        stdlib_method="fork",
        method_pinned=False,
        usable_cpus=16,
        cpu_binding="cpu_count",
        memory_gb=32.0,
        memory_binding="host",
        cgroup_version="v2",
        local_ranks=1,
        hatch=None,
    )
    values.update(fields)
    return HostCell(**values)


# 1. The axes and the tool's own truth ----------------------------------------------------------


def test_full_matrix_plans_at_least_the_required_cells():
    assert planned_cells(FULL_AXES) >= 17_280
    assert sum(1 for _ in host_cells(FULL_AXES)) * FULL_AXES.cells_per_host == planned_cells(FULL_AXES)
    assert {hatch for hatches in FULL_AXES.hatch_sets for hatch in hatches} == set(HATCHES) == set(HATCH_MEANINGS)
    # Garbage-hatch cells are judged against the unset cell just before them on the same host.
    assert all(hatches[0] is None for hatches in FULL_AXES.hatch_sets + QUICK_AXES.hatch_sets)


@pytest.mark.parametrize(
    "first, second",
    [
        ("usable_cpus", "cpu_binding"),
        ("memory_gb", "memory_binding"),
        ("memory_gb", "cgroup_version"),
        ("cpu_binding", "memory_binding"),
        ("local_ranks", "cpu_binding"),
        ("hatch", "usable_cpus"),
        ("hatch", "memory_gb"),
        ("hatch", "local_ranks"),
    ],
)
def test_rotated_variants_meet_every_value_where_workers_are_possible(first, second):
    # Rotation only earns its keep if the Linux fork hosts, where limits bite, still see every pair.
    cells = [
        cell for cell in host_cells(FULL_AXES) if cell.platform == "linux" and believable_start_method(cell) == "fork"
    ]
    seen = {(getattr(cell, first), getattr(cell, second)) for cell in cells}
    wanted = set(itertools.product({getattr(cell, first) for cell in cells}, {getattr(cell, second) for cell in cells}))
    assert seen == wanted


def test_truth_does_not_believe_a_lying_start_method():
    lying_fork = dict(platform="win32", multiprocess_method="fork")
    assert believable_start_method(linux_cell(stdlib_method="spawn", **lying_fork)) == "spawn"
    assert believable_start_method(linux_cell(stdlib_method="forkserver", **lying_fork)) is None
    assert not host_truth(linux_cell(platform="darwin"), BUDGET).workers_possible


def test_truth_reads_cpu_limits_only_where_they_exist():
    # A quota of 4.5 CPUs floors to 4 on Linux; macOS has no cgroups, so the roomy 256 remain.
    assert usable_cpus(linux_cell(usable_cpus=4, cpu_binding="cgroup_quota")) == 4
    assert usable_cpus(linux_cell(platform="darwin", usable_cpus=4, cpu_binding="cgroup_quota")) == 256
    assert usable_cpus(linux_cell(usable_cpus=2, cpu_binding="affinity")) == 2


def test_truth_memory_budget_by_hand():
    # cgroup limit 2 + 1 GiB, working set 1.5 - 0.5 = 1 GiB: 2 GiB free; half of it pays for 1 worker.
    cell = linux_cell(memory_gb=2.0, memory_binding="cgroup")
    assert available_bytes(cell) == 2 * GIB
    assert host_truth(cell, BUDGET).affordable_per_rank == 1
    # 32 GiB over 8 ranks: 4 GiB each, half of it is 2 workers per rank, 16 for the host.
    truth = host_truth(linux_cell(memory_gb=32.0, local_ranks=8), BUDGET)
    assert (truth.affordable_per_rank, truth.affordable_host) == (2, 16)
    assert host_truth(linux_cell(memory_gb=None), BUDGET).affordable_per_rank is None


# 2. The tool on the real policy -----------------------------------------------------------------


@pytest.mark.slow
def test_quick_matrix_passes_on_the_real_policy():
    out = io.StringIO()
    assert host_matrix.main(["--quick"], stdout=out) == 0, out.getvalue()
    text = out.getvalue()
    assert f"{planned_cells(QUICK_AXES):,} cells evaluated" in text
    assert "PASS: 0 violations" in text
    counts = violations_by_invariant(text)
    assert set(counts) == set(INVARIANT_NAMES)
    assert not any(counts.values())


def test_usage_errors_exit_2():
    out = io.StringIO()
    assert host_matrix.main(["--no-such-flag"], stdout=out) == 2
    assert "usage:" in out.getvalue()


@pytest.mark.slow
def test_a_policy_path_without_the_policy_is_refused(tmp_path):
    run = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--policy-path", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not from --policy-path" in run.stdout


# 3. Mutants: each one-line change must fail the run and name the invariant it breaks ------------


def mutate(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation target {old!r} must occur exactly once in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def policy_copies(root: Path, mutation: Optional[Tuple[str, str]] = None, mutate_twin: bool = True) -> Path:
    """Copies of unsloth_zoo and of the twin under `root`, with the mutation's line changed in each asked."""
    shutil.copytree(POLICY_SOURCE, root / "unsloth_zoo", ignore=shutil.ignore_patterns("__pycache__"))
    twin_dir = root / "unsloth"
    twin_dir.mkdir()
    (twin_dir / "__init__.py").write_text('"""Stand-in package holding only the twin under test."""\n')
    shutil.copy(TWIN_SOURCE, twin_dir / "dataset_num_proc.py")
    if mutation is not None:
        mutate(root / "unsloth_zoo" / "dataset_num_proc.py", *mutation)
        if mutate_twin:
            mutate(twin_dir / "dataset_num_proc.py", *mutation)
    return root


def run_tool_on(root: Path) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--policy-path", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    # The mutant, not the installed policy, must be what was evaluated.
    assert f"from {root / 'unsloth_zoo' / 'dataset_num_proc.py'}" in run.stdout, run.stdout + run.stderr
    assert f"from {root / 'unsloth' / 'dataset_num_proc.py'}" in run.stdout
    return run


MUTANTS = [
    pytest.param('if platform == "darwin":', "if False:", "no_workers_without_fork", id="darwin-veto-removed"),
    pytest.param(
        "        if method in offered:",
        "        if method is not None:",
        "no_workers_without_fork",
        id="lying-fork-believed",
    ),
    pytest.param(
        "count = min(max(cpus // 2, 2), AUTO_NUM_PROC_CAP)",
        "count = min(max(cpus // 2, 2), AUTO_NUM_PROC_CAP * 2)",
        "auto_capped",
        id="auto-cap-doubled",
    ),
    pytest.param("    if affordable < count:", "    if False:", "memory_covers_workers", id="memory-clamp-dropped"),
    pytest.param("share = memory / sizing.running", "share = memory", "ranks_share_host_memory", id="ranks-ignored"),
    pytest.param(
        "if serial_as_none or not workers_usable:", "if not workers_usable:", "map_never_1", id="map-site-gets-1"
    ),
    pytest.param(
        'return ("workers", count) if count >= 2 else ("serial", None)',
        'return ("workers", min(count, 8)) if count >= 2 else ("serial", None)',
        "hatch_obeyed",
        id="hatch-capped",
    ),
    pytest.param(
        "        sizing.count = sizing.requested\n",
        "        sizing.count = sizing.requested + 0.0\n",
        "typed",
        id="float-count",
    ),
    pytest.param(
        "        self.steps: List[Step] = []",
        "        self.steps: List[Step] = [Step(None, repr(os.urandom(8)))]",
        "deterministic",
        id="random-record",
    ),
    pytest.param(
        "batched=batched,\n    ).value",
        "batched=batched,\n    ).value or 1",
        "record_matches_value",
        id="get-disagrees-with-record",
    ),
    pytest.param(
        "return max(int(math.floor(value)), 1), source, tuple(readings)",
        "return max(int(math.floor(value)), 1) + 1, source, tuple(readings)",
        "record_tells_truth",
        id="one-cpu-too-many",
    ),
    pytest.param(
        "serial = 1 if any_large and forking else None",
        "serial = None",
        "responses_only_typed",
        id="responses-only-serial-auto-sizes",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("old, new, invariant", MUTANTS)
def test_mutant_fails_and_names_the_broken_invariant(tmp_path, old, new, invariant):
    run = run_tool_on(policy_copies(tmp_path, (old, new)))
    assert run.returncode == 1, run.stdout + run.stderr
    counts = violations_by_invariant(run.stdout)
    assert counts[invariant] > 0, run.stdout
    assert "failing cells:" in run.stdout
    assert re.search(rf"^(#\d+|first {invariant}) broke: .*\b{invariant}\b", run.stdout, re.MULTILINE), run.stdout


@pytest.mark.slow
def test_a_twin_that_drifts_fails_twins_agree(tmp_path):
    root = policy_copies(
        tmp_path, ("count = min(max(cpus // 2, 2), AUTO_NUM_PROC_CAP)", "count = 2"), mutate_twin=False
    )
    run = run_tool_on(root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert violations_by_invariant(run.stdout)["twins_agree"] > 0


# 4. Studio's wrapper ------------------------------------------------------------------------------

STUDIO_SOURCE = REPO_ROOT / "unsloth" / "unsloth_studio"
STUDIO_MULTI_GPU_CAP_LINE = "return min(count, MULTI_GPU_NUM_PROC_CAP)"


@pytest.mark.slow
def test_studio_that_cannot_be_imported_is_reported_skipped(tmp_path):
    root = policy_copies(tmp_path)
    (root / "unsloth_studio").mkdir()
    (root / "unsloth_studio" / "__init__.py").write_text('raise ImportError("simulated: Studio is not installed")\n')
    run = run_tool_on(root)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "studio  skipped: not importable (ImportError: simulated: Studio is not installed)" in run.stdout
    assert re.search(r"^studio_within_caps\s+skipped\s+0$", run.stdout, re.MULTILINE), run.stdout


@pytest.mark.slow
def test_studio_without_its_multi_gpu_cap_fails_studio_within_caps(tmp_path):
    caps = STUDIO_SOURCE / "caps.py"
    if not caps.is_file() or STUDIO_MULTI_GPU_CAP_LINE not in caps.read_text(encoding="utf-8"):
        pytest.skip("Studio's multi-GPU cap is not written as this mutant expects")
    root = policy_copies(tmp_path)
    shutil.copytree(STUDIO_SOURCE, root / "unsloth_studio", ignore=shutil.ignore_patterns("__pycache__"))
    mutate(root / "unsloth_studio" / "caps.py", STUDIO_MULTI_GPU_CAP_LINE, "return count")
    run = run_tool_on(root)
    assert f"from {root / 'unsloth_studio'}" in run.stdout, run.stdout
    assert run.returncode == 1, run.stdout + run.stderr
    counts = violations_by_invariant(run.stdout)
    assert counts["studio_within_caps"] > 0
    assert counts["memory_covers_workers"] == 0
