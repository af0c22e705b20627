"""`python3 dev.py test`: every default nox session, side by side in lanes, each held to its time budget.

Standard library only: `dev.py` runs it with nothing but python3. Sessions start longest budget first, one per lane
(one lane per core by default), each writing its own log, printed whole when it ends. A session fails when nox
fails, when it runs past its budget in docs/sessions.md, or when it leaves processes of its own behind. Each session
runs in a fresh copy of the checkout of its own (tools/checkout_copy.py: uncommitted edits included, nothing built),
so no session can lean on, or trip over, what another writes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, TextIO

from tools.checkout_copy import copy_checkout

ROOT = Path(__file__).resolve().parent.parent
BUDGETS_PAGE = ROOT / "docs" / "sessions.md"
BUDGETS_HEADING = "## Time budgets"
WHOLE_RUN = "whole run"
# Every process a session starts inherits this, so one left behind can be found after the session ends.
MARKER_VARIABLE = "UNSLOTH_CI_SESSION"
SLOWEST = "--durations=15"
END_WAIT_S = 10.0
LANES_VARIABLE = "UNSLOTH_CI_LANES"
# The sessions' copies, venvs and logs live under the checkout's .nox (ignored by git), outside any copy.
WORK_FOLDER = ".nox/lanes"
_ROW = re.compile(r"^\|\s*`?([^`|]+?)`?\s*\|\s*(\d+)\s*s\s*\|")
_PYTEST_COUNTS = re.compile(r"^=+ (.*\b(?:passed|failed|errors?|skipped|xfailed|xpassed)\b.*) in [\d.]+s")


@dataclass
class Session:
    """One nox session as `nox -l --json` names it, and what its run gave."""

    run_name: str  # what `nox -s` takes: `datasets(datasets_version='4.1.0')`
    budget_name: str  # its row in the budget table: the session function's name, `datasets`
    budget: int
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user and system time of nox and everything it waited for
    returncode: Optional[int] = None
    leftovers: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.run_name).strip("-")

    @property
    def over_budget(self) -> bool:
        return self.seconds > self.budget

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.leftovers and not self.over_budget


def parse_budgets(text: str) -> dict[str, int]:
    """The budget table under `## Time budgets`: session name to seconds (`| `mlx` | 600 s | ... |`)."""
    if BUDGETS_HEADING not in text:
        raise ValueError(f"no '{BUDGETS_HEADING}' section")
    section = text.split(BUDGETS_HEADING, 1)[1].split("\n## ", 1)[0]
    budgets = {}
    for line in section.splitlines():
        match = _ROW.match(line.strip())
        if match:
            budgets[match.group(1).strip()] = int(match.group(2))
    return budgets


def pytest_counts(log: str) -> dict[str, int]:
    """The counts on the closing lines of every pytest run in `log`, summed (`passed`, `failed`, ...)."""
    totals: dict[str, int] = {}
    for line in log.splitlines():
        match = _PYTEST_COUNTS.match(line.strip())
        if not match:
            continue
        for count, word in re.findall(r"(\d+) (\w+)", match.group(1)):
            key = {"error": "errors", "xfail": "xfailed"}.get(word, word)
            totals[key] = totals.get(key, 0) + int(count)
    return totals


def plan(listing: Sequence[Mapping[str, object]], budgets: Mapping[str, int]) -> list[Session]:
    """The default sessions, longest budget first; a session with no budget row is an error naming the fix."""
    missing = sorted({str(entry["name"]) for entry in listing} - set(budgets))
    if missing:
        raise ValueError(f"no budget for {', '.join(missing)}: add a row to '{BUDGETS_HEADING}' in {BUDGETS_PAGE.name}")
    sessions = [Session(str(entry["session"]), str(entry["name"]), budgets[str(entry["name"])]) for entry in listing]
    return sorted(sessions, key=lambda session: -session.budget)


def leftover_processes(marker: str, proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """Processes whose environment carries `marker` (pid and command line); empty where there is no /proc."""
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    found = []
    for entry in proc.glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # ended while we looked, or not ours to read
        found.append((int(entry.name), command))
    return sorted(found)


def _end(pids: Sequence[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Lanes:
    """Runs sessions through `nox` side by side and reports each as it ends."""

    def __init__(self, nox: Sequence[str], lanes: int, out: TextIO, work: Path, source: Path = ROOT) -> None:
        self.nox, self.lanes, self.out, self.work, self.source = list(nox), lanes, out, work, source
        self.run_id = uuid.uuid4().hex[:12]

    def _command(self, session: Session) -> tuple[list[str], Path]:
        copy = copy_checkout(self.source, self.work / "copies" / session.slug)
        # Venvs outside the copy, so the next run's fresh copy finds them installed (same paths, same inputs).
        envdir = self.work / "venvs"
        return [*self.nox, "-f", str(copy / "noxfile.py"), "--envdir", str(envdir), "-s", session.run_name], copy

    def run(self, sessions: Sequence[Session], clock: Callable[[], float] = time.monotonic) -> float:
        """Run every session; returns the wall time of the whole run. Stopped early, it ends every running session."""
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        waiting = list(sessions)
        running: dict[subprocess.Popen, tuple[Session, float]] = {}
        started = clock()
        try:
            while waiting or running:
                while waiting and len(running) < self.lanes:
                    session = waiting.pop(0)
                    running[self._start(session)] = (session, clock())
                    print(f"lanes > {_stamp(clock() - started)} started {session.run_name}", file=self.out, flush=True)
                time.sleep(0.5)
                for process in list(running):
                    cpu_seconds = _reap_if_done(process)
                    if cpu_seconds is None:
                        continue
                    session, began = running.pop(process)
                    session.seconds, session.returncode = clock() - began, process.returncode
                    session.cpu_seconds = cpu_seconds
                    self._reap(session, process.pid)
                    self._report(session, self.log_path(session).read_text(errors="replace"), clock() - started)
        finally:
            for process, (session, _) in running.items():
                self._reap(session, process.pid)  # interrupted: nothing a session started outlives the run
        return clock() - started

    def log_path(self, session: Session) -> Path:
        return self.work / "logs" / f"{session.slug}.log"

    def _start(self, session: Session) -> subprocess.Popen:
        command, cwd = self._command(session)
        environment = {**os.environ, MARKER_VARIABLE: f"{self.run_id}:{session.slug}"}
        # Each log ends with its slowest tests, where a session nearing its budget shows what to cut.
        environment["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {SLOWEST}".strip()
        with self.log_path(session).open("w") as log:
            # A session of its own, so the whole process group can be ended with the session.
            return subprocess.Popen(
                command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
            )

    def _reap(self, session: Session, pid: int) -> None:
        """Name and end what the session left running: its process group, and anything carrying its marker."""
        marker = f"{self.run_id}:{session.slug}"
        left = leftover_processes(marker)
        session.leftovers = [f"pid {found} `{command}`" for found, command in left]
        _end([found for found, _ in left])
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass  # the group is already gone
        # A killed process lingers a moment (longer on a loaded machine): the next session starts once it is gone.
        deadline = time.monotonic() + END_WAIT_S
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = leftover_processes(marker)

    def _report(self, session: Session, log: str, elapsed: float) -> None:
        rule = "=" * 20
        print(f"{rule} {session.run_name}: its log {rule}\n{log.rstrip()}\n", file=self.out)
        verdict = "passed" if session.passed else "FAILED"
        print(
            f"lanes > {_stamp(elapsed)} {session.run_name} {verdict} in {session.seconds:.0f} s"
            f" (budget {session.budget} s)",
            file=self.out,
            flush=True,
        )
        for line in session.leftovers:
            print(f"lanes > {session.run_name} left a process behind: {line} (ended now)", file=self.out)
        if session.over_budget:
            print(
                f"lanes > {session.run_name} took {session.seconds:.0f} s, over its budget of {session.budget} s: "
                f"make it faster, or raise its row in {BUDGETS_PAGE.relative_to(ROOT)} with the reason",
                file=self.out,
            )


def _reap_if_done(process: subprocess.Popen) -> Optional[float]:
    """The ended process's CPU seconds (its own and its waited-for descendants'), or None while it runs."""
    if not hasattr(os, "wait4"):
        return None if process.poll() is None else 0.0  # Windows: no rusage, so no CPU figure
    pid, status, usage = os.wait4(process.pid, os.WNOHANG)
    if pid == 0:
        return None
    process.returncode = os.waitstatus_to_exitcode(status)  # Popen now knows, and never waits on the pid again
    return usage.ru_utime + usage.ru_stime


def summarize(sessions: Sequence[Session], wall: float, whole_budget: int, logs: Mapping[str, str], out: TextIO) -> int:
    """The closing table, and 0 when every session passed inside its budget and the run inside the whole budget."""
    print("\nsession | result | seconds | budget | cpu seconds", file=out)
    for session in sorted(sessions, key=lambda session: session.run_name):
        result = "passed" if session.passed else ("over budget" if session.returncode == 0 else "FAILED")
        if session.returncode == 0 and session.leftovers:
            result = "left processes"
        print(
            f"{session.run_name} | {result} | {session.seconds:.0f} | {session.budget} | {session.cpu_seconds:.0f}",
            file=out,
        )
    cpu = sum(session.cpu_seconds for session in sessions)
    print(
        f"{WHOLE_RUN} | {'passed' if wall <= whole_budget else 'over budget'} | {wall:.0f} | {whole_budget} | {cpu:.0f}",
        file=out,
    )
    # Near the cores' whole capacity, only less work shortens the run; well below it, another lane would.
    cores = os.cpu_count() or 1
    print(
        f"cpu | {cpu:.0f} s used of the {cores} cores' {cores * wall:.0f} s ({cpu / max(cores * wall, 1e-9):.0%})",
        file=out,
    )
    totals: dict[str, int] = {}
    for text in logs.values():
        for key, count in pytest_counts(text).items():
            totals[key] = totals.get(key, 0) + count
    failed_sessions = sorted(session.run_name for session in sessions if not session.passed)
    if wall > whole_budget:
        print(f"the whole run took {wall:.0f} s, over its budget of {whole_budget} s ({BUDGETS_PAGE.name})", file=out)
    if failed_sessions:
        print(f"failed: {', '.join(failed_sessions)}", file=out)
    skipped = f", {totals['skipped']} skipped" if totals.get("skipped") else ""
    print(f"tests: {totals.get('passed', 0)} passed, {totals.get('failed', 0)} failed{skipped}", file=out)
    return 0 if not failed_sessions and wall <= whole_budget else 1


def list_default_sessions(nox: Sequence[str]) -> list[dict[str, object]]:
    listing = subprocess.run(
        [*nox, "-f", str(ROOT / "noxfile.py"), "-l", "--json"], capture_output=True, text=True, check=True
    )
    return list(json.loads(listing.stdout))


def main(argv: Sequence[str], nox: Sequence[str], out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python3 dev.py test", description=__doc__.splitlines()[0])
    default_lanes = int(os.environ.get(LANES_VARIABLE) or os.cpu_count() or 2)
    parser.add_argument("--lanes", type=int, default=default_lanes, help=f"sessions at once (${LANES_VARIABLE})")
    arguments = parser.parse_args(argv)
    try:
        budgets = parse_budgets(BUDGETS_PAGE.read_text())
        whole_budget = budgets.pop(WHOLE_RUN)
        sessions = plan(list_default_sessions(nox), budgets)
    except (ValueError, KeyError) as error:
        print(f"dev.py test: {error}", file=sys.stderr)
        return 2
    # SIGTERM (CI's stop, `kill`) unwinds like Ctrl-C, so the running sessions are ended, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    lanes = Lanes(nox, max(1, arguments.lanes), out, ROOT / WORK_FOLDER)
    print(f"lanes > {len(sessions)} sessions, {lanes.lanes} at a time, each in a fresh copy", file=out, flush=True)
    wall = lanes.run(sessions)
    logs = {session.slug: lanes.log_path(session).read_text(errors="replace") for session in sessions}
    return summarize(sessions, wall, whole_budget, logs, out)


def _stamp(seconds: float) -> str:
    return f"[{int(seconds) // 60:02d}:{int(seconds) % 60:02d}]"
