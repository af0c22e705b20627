"""A llama.cpp runner that dies says how: its killing signal by name, and for SIGILL the build and the wheel to blame.

Each runner here stands in for llama_cpp_greedy.py and kills itself for real, as a wrongly built llama.cpp would.
"""

from __future__ import annotations

import importlib.util
import signal
import textwrap
from pathlib import Path

import pytest

from .agreement import llama_cpp_continuations

NO_CORE_DUMP = "import os, resource, signal, sys\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"


def _runner(tmp_path: Path, body: str) -> Path:
    runner = tmp_path / "runner.py"
    runner.write_text(NO_CORE_DUMP + textwrap.dedent(body))
    return runner


def _failure(runner: Path) -> str:
    with pytest.raises(AssertionError) as raised:
        llama_cpp_continuations([Path("model.gguf")], "text", runner=runner)
    return str(raised.value)


def test_sigill_is_named_with_its_cause_and_the_installed_llama_cpp(tmp_path):
    message = _failure(_runner(tmp_path, "os.kill(os.getpid(), signal.SIGILL)\n"))
    assert message.startswith("llama.cpp was killed by SIGILL: it was built with instructions this CPU will not run")
    package = Path(importlib.util.find_spec("llama_cpp").origin).parent
    assert f"llama_cpp at {package}" in message
    assert "its stderr: (empty)" in message


@pytest.mark.parametrize("name", ["SIGSEGV", "SIGABRT", "SIGKILL"])
def test_other_signals_are_named_without_the_sigill_advice(tmp_path, name):
    message = _failure(_runner(tmp_path, f"os.kill(os.getpid(), signal.{name})\n"))
    assert message.startswith(f"llama.cpp was killed by {name}\n")
    assert "instructions" not in message


def test_a_shells_status_132_still_points_at_sigill(tmp_path):
    message = _failure(_runner(tmp_path, "sys.stderr.write('Illegal instruction\\n')\nsys.exit(128 + signal.SIGILL)\n"))
    status = 128 + signal.SIGILL
    assert message.startswith(f"llama.cpp's runner exited with status {status} (128 + SIGILL?): it was built with")
    assert message.endswith("its stderr: Illegal instruction")


def test_a_plain_failure_gives_its_status_and_stderr(tmp_path):
    message = _failure(_runner(tmp_path, "sys.exit('no such file: model.gguf')\n"))
    assert message == "llama.cpp's runner exited with status 1\nits stderr: no such file: model.gguf"


def test_a_runner_that_succeeds_raises_nothing(tmp_path):
    runner = _runner(tmp_path, 'print(\'{"path": "/x/model.gguf", "tokens": [1]}\')\n')
    assert llama_cpp_continuations([Path("model.gguf")], "text", runner=runner) == {
        "model.gguf": {"path": "/x/model.gguf", "tokens": [1]}
    }
