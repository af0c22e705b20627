"""The tests in this folder need the CPU torch (`pip install torch==2.13.0`); without it they fail, never skip."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

import pytest

from tools.kits.hub_home_link import HubHomeLink
from tools.kits.warm_python import WarmPython

from ..conftest import REPO_ROOT


@pytest.fixture(autouse=True)
def torch_is_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("tests/mlx_api/with_torch needs torch installed (run them in the mlx_torch session)")


# Imported once for every notebook replay of the session, in the order a cold replay imports them; each notebook
# imports them itself, so only the order differs from a cold start. The Hub-reading ones read HF_HOME at import:
# `HubHomeLink` gives every replay the same path, with its own cache behind it. mlx_vlm sets two transformers
# variables when imported, so it loads, ahead of transformers, only where a cold replay loads it first: the vision
# notebooks' setup (`prepare_vision`) builds its model with mlx_vlm; the text and embedding ones never import it.
PRELOADED = (
    "torch",
    "torch.distributed.tensor",
    "torch.fx.experimental.symbolic_shapes",
    "numpy",
    "mlx.core",
    "PIL.Image",
)
TEXT_PRELOADED = (
    *PRELOADED,
    "transformers",
    "datasets",
    "transformers.models.auto.tokenization_auto",
    "transformers.modeling_utils",
)
VISION_PRELOADED = (*PRELOADED, "mlx_vlm", "mlx_vlm.utils", "datasets", "transformers.modeling_utils")


def notebook_command(name: str) -> str:
    """The command line the docs give for a notebook, run from the checkout; `run_notebook` runs exactly this."""
    return f"UNSLOTH_MLX=1 python tools/run_cells.py examples/notebooks/{name}.py"


def loads_mlx_vlm_first(name: str) -> bool:
    return "prepare_vision(" in (REPO_ROOT / "examples" / "notebooks" / f"{name}.py").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def hub_home(tmp_path_factory: pytest.TempPathFactory) -> HubHomeLink:
    return HubHomeLink(tmp_path_factory.mktemp("notebook-hub"))


@pytest.fixture(scope="session")
def warm_python(hub_home: HubHomeLink) -> Iterator[Dict[bool, WarmPython]]:
    """{loads mlx_vlm first: its server}; both start, side by side, before the first replay's test, as session
    fixtures must (a process a test starts and leaves running is reported as its leak)."""
    servers: Dict[bool, WarmPython] = {}
    try:
        for vision, modules in ((False, TEXT_PRELOADED), (True, VISION_PRELOADED)):
            servers[vision] = WarmPython(modules, env={**os.environ, **hub_home.environment()})
        for server in servers.values():  # started side by side, one per core
            server.wait_ready()
        yield servers
    finally:
        for server in servers.values():
            server.close()


@pytest.fixture
def run_notebook(
    warm_python: Dict[bool, WarmPython], hub_home: HubHomeLink
) -> Callable[..., Tuple[subprocess.CompletedProcess, List[dict]]]:
    """`run_notebook(name, workdir, timeout=900)`: the docs' command line for NAME, in a child of the warm
    interpreter, with the scratch folder (and its Hub cache, `hf-home`, as the notebooks' setup makes it) in
    `workdir`; returns the run and each cell's outcome."""

    def run(name: str, workdir: Path, timeout: float = 900) -> Tuple[subprocess.CompletedProcess, List[dict]]:
        assignment, _python, *arguments = notebook_command(name).split()
        key, value = assignment.split("=")
        environment = {**os.environ, **hub_home.environment(), key: value, "NOTEBOOK_WORKDIR": str(workdir)}
        command = [sys.executable, *arguments]  # `python` as a user's venv gives it
        hub_home.point_at(workdir / "hf-home")
        result = warm_python[loads_mlx_vlm_first(name)].run(
            command, env=environment, cwd=str(REPO_ROOT), timeout=timeout
        )
        cells = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"cell"')]
        return result, cells

    return run
