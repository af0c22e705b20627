"""Processes a test session started and left running: found, named, then killed.

A session marks everything it starts by putting `UNSLOTH_TEST_SESSION=<token>` in its environment (children inherit
it, and keep it when their parent dies and they are re-parented away); `UNSLOTH_TEST_STARTED_BY` names the test
running at the time. A process counts as the session's if it carries the token or descends from the session's
process. Linux reads /proc directly (psutil walks every process and is ten times slower); elsewhere psutil answers.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Set

SESSION_VARIABLE = "UNSLOTH_TEST_SESSION"
STARTED_BY_VARIABLE = "UNSLOTH_TEST_STARTED_BY"
PROC = Path("/proc")
GRACE_VARIABLE = "UNSLOTH_TEST_LEFTOVER_GRACE_S"
# How long a leftover may take to finish exiting on its own (a pool being joined, a rank winding down).
DEFAULT_GRACE_S = 2.0
_POLL_S = 0.05
# Helpers an interpreter keeps for the rest of its life and that exit with it: multiprocessing's resource tracker
# and fork server (the stdlib's and multiprocess's); started by the session's own process, they are not leftovers.
INTERPRETER_HELPERS = re.compile(r"from multiprocess(ing)?\.(resource_tracker|forkserver) import main")
_MAX_DEPTH = 64
# A process caught mid-exec reads an empty command line and environment for a moment; how long to wait them out.
_SETTLE_S = 1.0


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    ppid: int
    alive: bool  # False for a zombie: it has exited and only waits to be reaped
    environ: Optional[Dict[str, str]]  # None when it may not be read (another user's process)


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str
    started_by: str  # the test running when it started, "" when it carries no mark

    def describe(self) -> str:
        where = f"started by {self.started_by}" if self.started_by else "started by this session (unmarked)"
        return f"pid {self.pid} ({where}): {self.command}"


# ---- parsing /proc (pure) ----


def parse_stat(data: bytes) -> tuple:
    """(state, ppid) from /proc/<pid>/stat; the command field may hold spaces and parentheses, so split after it."""
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1])


def parse_environ(data: bytes) -> Dict[str, str]:
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def parse_cmdline(data: bytes) -> str:
    return " ".join(part.decode(errors="replace") for part in data.rstrip(b"\0").split(b"\0"))


# ---- reading processes (I/O) ----


def _read_bytes(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes()
    except OSError:  # gone, or not ours to read
        return None


def _read_proc(pid: int, with_environ: bool) -> Optional[ProcessFacts]:
    stat = _read_bytes(PROC / str(pid) / "stat")
    if stat is None:
        return None
    state, ppid = parse_stat(stat)
    environ = _read_bytes(PROC / str(pid) / "environ") if with_environ else None
    return ProcessFacts(pid, ppid, state not in ("Z", "X"), None if environ is None else parse_environ(environ))


def _read_psutil(pid: int, with_environ: bool) -> Optional[ProcessFacts]:
    import psutil

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            ppid, status = process.ppid(), process.status()
            try:
                environ: Optional[Dict[str, str]] = process.environ() if with_environ else None
            except psutil.AccessDenied:
                environ = None
    except psutil.NoSuchProcess:
        return None
    return ProcessFacts(pid, ppid, status not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD), environ)


def _on_proc() -> bool:
    return sys.platform.startswith("linux") and (PROC / "self" / "stat").exists()


def read_process(pid: int, with_environ: bool = True) -> Optional[ProcessFacts]:
    """What is known of `pid`, or None once it is gone; its environment only when asked (a walk up needs none)."""
    return _read_proc(pid, with_environ) if _on_proc() else _read_psutil(pid, with_environ)


def read_command(pid: int) -> str:
    """The command line of `pid`, read only for the few processes that get named."""
    if _on_proc():
        return parse_cmdline(_read_bytes(PROC / str(pid) / "cmdline") or b"")
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def current_pids() -> Set[int]:
    """Every process id on the machine now (cheap on Linux: one directory listing)."""
    if _on_proc():
        return {int(name) for name in os.listdir(PROC) if name.isdigit()}
    import psutil

    return set(psutil.pids())


# ---- finding and reaping ----


def _descends_from(facts: ProcessFacts, root: int, known: Dict[int, Optional[ProcessFacts]]) -> bool:
    current: Optional[ProcessFacts] = facts
    for _ in range(_MAX_DEPTH):
        if current is None or current.ppid <= 1:
            return False
        if current.ppid == root:
            return True
        if current.ppid not in known:
            known[current.ppid] = read_process(current.ppid, with_environ=False)
        current = known[current.ppid]
    return False


@functools.lru_cache(maxsize=None)
def _ancestors(pid: int) -> FrozenSet[int]:
    """The processes above `pid` (the shell, nox, ...): fixed for its life, so read once."""
    found, facts = set(), read_process(pid, with_environ=False)
    while facts is not None and facts.ppid > 1 and len(found) < _MAX_DEPTH:
        found.add(facts.ppid)
        facts = read_process(facts.ppid, with_environ=False)
    return frozenset(found)


def find_leftovers(
    token: str, candidates: Optional[Iterable[int]] = None, root: Optional[int] = None
) -> List[Leftover]:
    """The live processes among `candidates` (default: all) that carry `token` or descend from `root` (this one)."""
    root = os.getpid() if root is None else root
    excluded = {root, *_ancestors(root)}
    pids = sorted(set(current_pids() if candidates is None else candidates) - excluded)
    known: Dict[int, Optional[ProcessFacts]] = {pid: read_process(pid) for pid in pids}
    leftovers = []
    for pid in pids:
        facts = known[pid]
        if facts is None or not facts.alive:
            continue
        command = read_command(pid)
        if not command and facts.ppid == root:  # a child mid-exec (kernel threads read empty too, and never settle)
            facts, command = _settled(pid)
            if facts is None or not facts.alive:
                continue
        if facts.ppid == root and INTERPRETER_HELPERS.search(command):
            continue
        environ = facts.environ or {}
        if environ.get(SESSION_VARIABLE) == token:
            leftovers.append(Leftover(pid, command, environ.get(STARTED_BY_VARIABLE, "")))
        elif _descends_from(facts, root, known):
            leftovers.append(Leftover(pid, command, ""))
    return leftovers


def _settled(pid: int) -> tuple:
    """(facts, command) of `pid` once its command line reads non-empty (an exec finished), or as they stand after
    `_SETTLE_S`: the resource tracker, read during its exec, would otherwise look like an unmarked leftover."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        facts, command = read_process(pid), read_command(pid)
        if command or facts is None or not facts.alive or time.monotonic() >= deadline:
            return facts, command
        time.sleep(_POLL_S)


def _alive(pids: Iterable[int]) -> Set[int]:
    alive = set()
    for pid in pids:
        facts = read_process(pid, with_environ=False)
        if facts is not None and facts.alive:
            alive.add(pid)
    return alive


def _reap_child(pid: int) -> None:
    """Collect the exit status of a killed child of this process, so it leaves no zombie behind."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child, or already collected
        pass


def configured_grace_s() -> float:
    return float(os.environ.get(GRACE_VARIABLE) or DEFAULT_GRACE_S)


def reap(leftovers: List[Leftover], grace_s: Optional[float] = None) -> List[Leftover]:
    """Give `leftovers` `grace_s` (default: `$UNSLOTH_TEST_LEFTOVER_GRACE_S`, else 2) to exit on their own, then
    kill those still alive; returns the ones that had to be killed."""
    if not leftovers:
        return []
    grace_s = configured_grace_s() if grace_s is None else grace_s
    deadline = time.monotonic() + grace_s
    alive = _alive(item.pid for item in leftovers)
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = _alive(alive)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        for pid in alive:
            _reap_child(pid)
        if not _alive(alive):
            break
        time.sleep(_POLL_S)
    for pid in alive:
        _reap_child(pid)  # those that turned into zombies after the last pass
    return [item for item in leftovers if item.pid in alive]
