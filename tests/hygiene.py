"""The pytest plugin every session loads (tests/conftest.py): a test reaps what it starts and writes nothing into
the checkout.

Around each test: a process it started that is still alive after its teardown is killed and the test errors,
naming it; so does a new entry at the checkout's root. At the session's end: every process still carrying the
session's mark, or descending from it, is killed and named, and so is any file added, removed or rewritten anywhere
in the checkout; the session then fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any, List

import pytest

from tools.kits import checkout_changes, leftover_processes
from tools.kits.leftover_processes import SESSION_VARIABLE, STARTED_BY_VARIABLE

OUTSIDE_A_TEST = "a fixture or hook outside any one test (module or session scope, collection)"


@dataclass
class _SessionState:
    token: str
    checkout: Any
    problems: List[str] = field(default_factory=list)


_STATE = pytest.StashKey[_SessionState]()
_HYPOTHESIS_HOME = pytest.StashKey[str]()
HYPOTHESIS_VARIABLE = "HYPOTHESIS_STORAGE_DIRECTORY"


def pytest_configure(config: pytest.Config) -> None:
    # A fresh token for every pytest process, an xdist worker or a pytest run by a test included.
    token = uuid.uuid4().hex
    os.environ[SESSION_VARIABLE] = token
    os.environ[STARTED_BY_VARIABLE] = OUTSIDE_A_TEST
    config.stash[_STATE] = _SessionState(token, checkout_changes.snapshot(config.rootpath))
    if HYPOTHESIS_VARIABLE not in os.environ:
        # Hypothesis caches in `./.hypothesis` (its constants even with `database=None`), and may do so at collection.
        config.stash[_HYPOTHESIS_HOME] = os.environ[HYPOTHESIS_VARIABLE] = tempfile.mkdtemp(prefix="hypothesis-")


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_HYPOTHESIS_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
        del os.environ[HYPOTHESIS_VARIABLE]


@pytest.fixture(autouse=True)
def _reaps_what_it_starts_and_leaves_the_checkout_alone(request: pytest.FixtureRequest) -> Any:
    """Runs inside every higher-scoped fixture, so the processes those keep for later tests are not counted."""
    state = request.config.stash[_STATE]
    root = request.config.rootpath
    entries_before = checkout_changes.top_level(root)
    pids_before = leftover_processes.current_pids()
    os.environ[STARTED_BY_VARIABLE] = request.node.nodeid
    try:
        yield
    finally:
        os.environ[STARTED_BY_VARIABLE] = OUTSIDE_A_TEST
    problems = []
    started = leftover_processes.current_pids() - pids_before
    leftovers = leftover_processes.find_leftovers(state.token, started) if started else []
    killed = leftover_processes.reap(leftovers)
    if killed:
        named = "\n  ".join(item.describe() for item in killed)
        problems.append(f"this test left {len(killed)} process(es) running, now killed:\n  {named}")
    added = sorted(checkout_changes.top_level(root) - entries_before)
    if added:
        problems.append(f"this test wrote {added} into {root}: give it a path under tmp_path")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After every fixture's teardown (and xdist's workers' end): what is left is nobody's to clean up but ours."""
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    killed = leftover_processes.reap(leftover_processes.find_leftovers(state.token))
    if killed:
        named = "\n  ".join(item.describe() for item in killed)
        state.problems.append(
            f"{len(killed)} process(es) of this session were still running at its end, now killed:\n  {named}"
        )
    written = checkout_changes.changes(state.checkout, checkout_changes.snapshot(session.config.rootpath))
    if written:
        listed = "\n  ".join(written)
        state.problems.append(f"this session changed the checkout {session.config.rootpath}:\n  {listed}")
    if state.problems and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.problems:
        return
    terminalreporter.section("what this session left behind", sep="=", red=True, bold=True)
    for problem in state.problems:
        terminalreporter.line(problem, red=True)
