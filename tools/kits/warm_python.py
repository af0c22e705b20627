"""Run `python SCRIPT ARGS` in a child forked from an interpreter that has already imported the slow,
environment-blind modules (torch): the notebook replays pay torch's import once per session, not once per notebook.

Each run gets a fresh process, as `subprocess.run` gives it: its own environment, working folder, argv, stdout and
stderr files, exit status and atexit handlers. What differs from a cold start is only that the preloaded modules are
already in `sys.modules`. They are imported in the server's environment (`env`), so a module that reads the
environment at import (huggingface_hub reads HF_HOME) reads what the server was given, not what a run asks for; what
they write into `os.environ` at import (mlx_vlm sets TRANSFORMERS_VERBOSITY) is in every run's environment, as in a
cold start that imports them.

    server = WarmPython(["torch"]); server.run([sys.executable, "script.py"], env=..., cwd=..., timeout=60)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Sequence

_POLL_S = 0.05


class WarmPython:
    """One warm server; `run` is `subprocess.run(command, capture_output=True, text=True, ...)` for python scripts."""

    def __init__(self, preload: Sequence[str], env: Optional[Dict[str, str]] = None) -> None:
        self._server = subprocess.Popen(
            [sys.executable, __file__, *preload], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self._ready = False  # the imports go on while the caller starts other work (a second server)

    def wait_ready(self) -> None:
        """Wait for the preloads to finish (the first `run` does)."""
        if not self._ready:
            ready = self._server.stdout.readline()  # type: ignore[union-attr]
            if ready.strip() != "ready":
                self.close()
                raise RuntimeError(f"the warm interpreter did not start (it said {ready!r})")
            self._ready = True

    def run(
        self, command: Sequence[str], *, env: Dict[str, str], cwd: str, timeout: float
    ) -> subprocess.CompletedProcess:
        if len(command) < 2 or command[0] != sys.executable or command[1].startswith("-"):
            raise ValueError(f"runs `{sys.executable} SCRIPT ARGS` only, not {list(command)}")
        self.wait_ready()
        with tempfile.TemporaryDirectory(prefix="warm-python-") as folder:
            stdout, stderr = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"argv": list(command[1:]), "env": dict(env), "cwd": str(cwd), "timeout": timeout}
            request.update(stdout=str(stdout), stderr=str(stderr))
            self._server.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            self._server.stdin.flush()  # type: ignore[union-attr]
            reply = self._server.stdout.readline()  # type: ignore[union-attr]
            if not reply:
                raise RuntimeError(f"the warm interpreter died (exit status {self._server.poll()})")
            answer = json.loads(reply)
            out, err = (path.read_text(errors="replace") if path.exists() else "" for path in (stdout, stderr))
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(list(command), timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(list(command), answer["returncode"], out, err)

    def close(self) -> None:
        # Closed whether or not the server still runs: an exited server's open pipe warns when collected.
        with contextlib.suppress(BrokenPipeError):
            self._server.stdin.close()  # type: ignore[union-attr]
        if self._server.poll() is None:
            try:
                self._server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        self._server.stdout.close()  # type: ignore[union-attr]


# ---- the server (this file run as a script) ----


def _run_child(request: dict, written: Dict[str, str]) -> int:
    """In the forked child: become the requested process, run the script as `__main__`, return its exit status."""
    os.setpgid(0, 0)  # its own group, so a timeout also ends what the script started
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(written)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"]), (0, os.devnull)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC if fd else os.O_RDONLY)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = list(request["argv"])
    sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # what an uncaught exception does to a fresh interpreter: a traceback and status 1
        traceback.print_exc()
        return 1
    return 0


def _become_subreaper() -> None:
    """Orphans of a run are re-parented to this server (Linux), which reaps them, so a finished group reads empty."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _group_alive(group: int) -> bool:
    while True:  # reap whatever of ours has exited: the run's orphans come to us
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(pid: int, timeout: float) -> tuple:
    """(exit status, timed out): like `subprocess.run` reading pipes to their end, it waits for what the script
    started in its group (a pool's workers, the resource tracker) to exit as well."""
    deadline, status = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(raw) if done else None
        if status is not None and not _group_alive(pid):
            return status, False
        time.sleep(_POLL_S)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if status is None:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    while _group_alive(pid):
        time.sleep(_POLL_S)
    return status, True


def serve(preload: List[str]) -> Optional[int]:
    """Import `preload`, then fork one child per request line; returns the child's exit status in the child."""
    _become_subreaper()
    before = dict(os.environ)
    for name in preload:
        importlib.import_module(name)
    written = {key: value for key, value in os.environ.items() if before.get(key) != value}
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return _run_child(request, written)
        returncode, timed_out = _wait(pid, float(request["timeout"]))
        print(json.dumps({"returncode": returncode, "timed_out": timed_out}), flush=True)
    return None


if __name__ == "__main__":
    status = serve(sys.argv[1:])
    if status is not None:
        sys.exit(status)  # the child ends as a fresh interpreter would: atexit handlers run, streams flushed
