"""The tests in this folder need the CPU torch (`pip install torch==2.13.0`); without it they fail, never skip."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest

from tools.kits.warm_python import WarmPython

from ..conftest import REPO_ROOT


@pytest.fixture(autouse=True)
def torch_is_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("tests/mlx_api/with_torch needs torch installed (run them in the mlx_torch session)")


# Imported once for every notebook replay of the session; each notebook imports them itself, so only the order
# differs from a cold start. Nothing here may read the environment at import (each replay sets its own Hub cache).
PRELOADED = (
    "torch",
    "torch.distributed.tensor",
    "torch.fx.experimental.symbolic_shapes",
    "numpy",
    "mlx.core",
    "PIL.Image",
)


def notebook_command(name: str) -> str:
    """The command line the docs give for a notebook, run from the checkout; `run_notebook` runs exactly this."""
    return f"UNSLOTH_MLX=1 python tools/run_cells.py examples/notebooks/{name}.py"


@pytest.fixture(scope="session")
def warm_python() -> Iterator[WarmPython]:
    server = WarmPython(PRELOADED)
    yield server
    server.close()


@pytest.fixture
def run_notebook(warm_python: WarmPython) -> Callable[..., Tuple[subprocess.CompletedProcess, List[dict]]]:
    """`run_notebook(name, workdir, timeout=900)`: the docs' command line for NAME, in a child of the warm
    interpreter, with the scratch folder in `workdir`; returns the run and each cell's outcome."""

    def run(name: str, workdir: Path, timeout: float = 900) -> Tuple[subprocess.CompletedProcess, List[dict]]:
        assignment, _python, *arguments = notebook_command(name).split()
        key, value = assignment.split("=")
        environment = {**os.environ, key: value, "NOTEBOOK_WORKDIR": str(workdir)}
        command = [sys.executable, *arguments]  # `python` as a user's venv gives it
        result = warm_python.run(command, env=environment, cwd=str(REPO_ROOT), timeout=timeout)
        cells = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"cell"')]
        return result, cells

    return run
