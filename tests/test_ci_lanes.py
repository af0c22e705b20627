"""`python3 dev.py test`'s lanes: budgets read from docs/sessions.md, sessions run side by side, leftovers named."""

from __future__ import annotations

import ast
import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools import ci_lanes

ROOT = Path(__file__).resolve().parent.parent

PAGE = """# Sessions

## Time budgets

| session | budget | why |
| --- | --- | --- |
| `whole run` | 1800 s | all |
| `mlx` | 900 s | the suite |
| `datasets` | 180 s | each release |

## Next section

| `other` | 5 s | not a budget |
"""

# Stands in for nox: `-s NAME` behaves as the name says, so the real scheduler, logs and reaping are exercised.
FAKE_NOX = textwrap.dedent(
    """
    import os, subprocess, sys, time
    name = sys.argv[sys.argv.index("-s") + 1]
    print(f"fake nox running {name}")
    if name.startswith("slow"):
        time.sleep(1.5)
    if name.startswith("busy"):
        # CPU time in a grandchild: what pytest's subprocesses burn counts toward the session's.
        burn = "import time; end = time.process_time() + 0.6; any(iter(lambda: time.process_time() >= end, True))"
        subprocess.run([sys.executable, "-c", burn])
    if name.startswith("leaky"):
        # A grandchild in a session of its own, as a daemon a test forgot would be: outside the process group.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    if name.startswith("tested"):
        print("files here:", sorted(os.listdir(".")))
        print("pytest options:", os.environ.get("PYTEST_ADDOPTS"))
        print("========== 3 passed, 1 skipped in 0.50s ==========")
    sys.exit(1 if name.startswith("bad") else 0)
    """
)


@pytest.fixture
def checkout(tmp_path):
    """A small git checkout: a committed file, an uncommitted one, and an ignored one."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / ".gitignore").write_text("*.log\n")
    (root / "noxfile.py").write_text("# sessions\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"], cwd=root, check=True)
    (root / "uncommitted.py").write_text("edit = 1\n")
    (root / "build.log").write_text("left by a build\n")
    return root


def test_the_budget_table_is_read_from_its_section_only():
    assert ci_lanes.parse_budgets(PAGE) == {"whole run": 1800, "mlx": 900, "datasets": 180}


def test_a_page_without_the_section_is_refused():
    with pytest.raises(ValueError, match="Time budgets"):
        ci_lanes.parse_budgets("# Sessions\n")


def test_every_default_session_has_a_budget_on_the_real_page():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    defaults = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "nox.options.sessions"
    )
    names = set(ast.literal_eval(defaults))
    budgets = ci_lanes.parse_budgets((ROOT / "docs" / "sessions.md").read_text())
    assert names and names <= set(budgets), sorted(names - set(budgets))
    # CI stops a run at 5,400 s; the whole-run budget keeps a third of that spare (the goal is 1,800 s, docs/sessions.md).
    assert budgets[ci_lanes.WHOLE_RUN] <= 3600


def test_a_session_without_a_budget_is_an_error_naming_the_page():
    listing = [{"session": "mlx", "name": "mlx"}, {"session": "new", "name": "new"}]
    with pytest.raises(ValueError, match=r"no budget for new: add a row .* sessions\.md"):
        ci_lanes.plan(listing, {"mlx": 900})


def test_sessions_start_longest_budget_first_and_parametrized_runs_share_their_row():
    listing = [
        {"session": "lint", "name": "lint"},
        {"session": "datasets(datasets_version='4.1.0')", "name": "datasets"},
        {"session": "mlx", "name": "mlx"},
    ]
    planned = ci_lanes.plan(listing, {"lint": 60, "datasets": 180, "mlx": 900})
    assert [(session.run_name, session.budget) for session in planned] == [
        ("mlx", 900),
        ("datasets(datasets_version='4.1.0')", 180),
        ("lint", 60),
    ]
    assert planned[1].slug == "datasets-datasets-version-4.1.0"


def test_pytest_closing_lines_are_summed_across_runs():
    log = (
        "===== 964 passed, 3 skipped in 253.12s (0:04:13) =====\n"
        "noise 5 passed\n"
        "==== 1 failed, 58 passed, 2 xfailed, 1 error in 9.00s ====\n"
    )
    assert ci_lanes.pytest_counts(log) == {"passed": 1022, "skipped": 3, "failed": 1, "xfailed": 2, "errors": 1}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_process_carrying_the_marker_is_found_and_others_are_not():
    marker = f"test-{os.getpid()}"
    environment = {**os.environ, ci_lanes.MARKER_VARIABLE: marker}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=environment)
    try:
        time.sleep(0.2)
        found = ci_lanes.leftover_processes(marker)
        assert [pid for pid, _ in found] == [child.pid]
        assert "time.sleep(60)" in found[0][1]
        assert ci_lanes.leftover_processes(marker + "-other") == []
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_the_lanes_run_every_session_and_fail_the_bad_the_slow_and_the_leaky(tmp_path, checkout):
    fake = tmp_path / "fake_nox.py"
    fake.write_text(FAKE_NOX)
    sessions = [
        ci_lanes.Session("slow-over-budget", "slow", 1),
        ci_lanes.Session("tested", "tested", 60),
        ci_lanes.Session("bad", "bad", 60),
        ci_lanes.Session("leaky", "leaky", 60),
        ci_lanes.Session("busy", "busy", 60),
    ]
    out = io.StringIO()
    lanes = ci_lanes.Lanes([sys.executable, str(fake)], 2, out, tmp_path / "work", checkout)
    wall = lanes.run(sessions)
    text = out.getvalue()
    results = {session.run_name: session for session in sessions}
    assert results["tested"].passed and results["tested"].returncode == 0
    assert results["bad"].returncode == 1 and not results["bad"].passed
    assert results["slow-over-budget"].returncode == 0 and results["slow-over-budget"].over_budget
    assert results["leaky"].returncode == 0 and len(results["leaky"].leftovers) == 1
    assert "time.sleep(120)" in results["leaky"].leftovers[0]
    # CPU seconds are the session's and its descendants': a sleeping session uses little, a busy one its work.
    assert results["busy"].cpu_seconds >= 0.6 and results["slow-over-budget"].cpu_seconds < 0.6
    assert "leaky left a process behind" in text and "over its budget of 1 s" in text
    assert "fake nox running tested" in text  # each session's log is printed
    # Each session ran in a fresh copy: the uncommitted edit is there, the ignored build output is not.
    assert "files here: ['.git', '.gitignore', 'noxfile.py', 'uncommitted.py']" in text
    assert "pytest options: --durations=15" in text  # each log ends with its slowest tests
    # The leftover was ended, not just named.
    assert ci_lanes.leftover_processes(f"{lanes.run_id}:leaky") == []
    logs = {session.slug: lanes.log_path(session).read_text() for session in sessions}
    summary = io.StringIO()
    assert ci_lanes.summarize(sessions, wall, 1800, logs, summary) == 1
    closing = summary.getvalue().splitlines()
    assert closing[-1] == "tests: 3 passed, 0 failed, 1 skipped"
    assert "failed: bad, leaky, slow-over-budget" in closing
    assert "busy | passed |" in summary.getvalue() and any(line.startswith("cpu |") for line in closing)
    # Two lanes: the 1.5 s session ran beside the others, not before them.
    assert wall < 1.5 + 3


def test_a_run_inside_every_budget_passes():
    sessions = [ci_lanes.Session("lint", "lint", 60, seconds=5, returncode=0)]
    out = io.StringIO()
    assert ci_lanes.summarize(sessions, 5, 1800, {"lint": ""}, out) == 0
    assert out.getvalue().splitlines()[-1] == "tests: 0 passed, 0 failed"
    assert ci_lanes.summarize(sessions, 1801, 1800, {"lint": ""}, io.StringIO()) == 1


INTERRUPTED_RUN = """
import sys
from tools import ci_lanes
lanes = ci_lanes.Lanes([sys.executable, sys.argv[1]], 2, sys.stdout, ci_lanes.Path(sys.argv[2]), ci_lanes.Path(sys.argv[3]))
print(lanes.run_id, flush=True)
import signal
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
lanes.run([ci_lanes.Session("leaky-slow", "leaky", 600), ci_lanes.Session("slow", "slow", 600)])
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_stopped_run_ends_every_session_it_started(tmp_path, checkout):
    fake = tmp_path / "fake_nox.py"
    fake.write_text(FAKE_NOX.replace("time.sleep(1.5)", "time.sleep(300)"))
    runner = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_RUN, str(fake), str(tmp_path / "work"), str(checkout)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    run_id = runner.stdout.readline().strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(ci_lanes.leftover_processes(f"{run_id}:slow")) < 1:
        time.sleep(0.2)
    time.sleep(1)  # the leaky session's daemon is started too
    assert ci_lanes.leftover_processes(f"{run_id}:slow"), "the slow session never started"
    runner.terminate()
    assert runner.wait(timeout=60) == 143
    runner.stdout.close()
    assert ci_lanes.leftover_processes(f"{run_id}:slow") == []
    assert ci_lanes.leftover_processes(f"{run_id}:leaky-slow") == []
