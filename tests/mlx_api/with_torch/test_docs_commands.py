"""The `UNSLOTH_MLX=1 ...` command lines of the README and the docs pages, run as written.

tests/test_commands.py runs every other line of those blocks on a bare python3; these need mlx, and the CPU torch
that the published notebooks import.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT
from . import (
    test_embedding_notebooks,
    test_family_notebooks,
    test_grpo_notebooks,
    test_new_family_notebooks,
    test_published_notebooks,
    test_rl_notebooks_more,
    test_vision_notebooks,
)
from .conftest import notebook_command

# A notebook's line is run as written by the test that replays it cell by cell (`run_notebook`), not run twice.
REPLAYED = {
    notebook_command(name): module.__name__.rsplit(".", 1)[-1]
    for module in (
        test_embedding_notebooks,
        test_family_notebooks,
        test_grpo_notebooks,
        test_new_family_notebooks,
        test_published_notebooks,
        test_rl_notebooks_more,
        test_vision_notebooks,
    )
    for name in module.CELL_COUNTS
}

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _mlx_lines(page: Path) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("UNSLOTH_MLX=1 ")]


LINES = [(page, line) for page in PAGES for line in _mlx_lines(page)]


def test_the_docs_hold_mlx_commands_to_run():
    assert LINES, "no `UNSLOTH_MLX=1` command line found in the README or docs/"


RUN_HERE = [(page, line) for page, line in LINES if line not in REPLAYED]


def test_a_notebook_line_is_replayed_as_written_elsewhere():
    replayed = [line for _, line in LINES if line in REPLAYED]
    # If the notebook tests' command and the docs' ever differ, the docs' lines fall back to running here.
    assert len(replayed) >= 10, replayed


@pytest.mark.parametrize(("page", "line"), RUN_HERE, ids=[f"{page.name}:{line[:60]}" for page, line in RUN_HERE])
def test_the_mlx_command_line_runs_as_written(page, line):
    # `python` in the line is this session's interpreter, as it is for a user inside their venv.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(["bash", "-c", line], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{page.name}: `{line}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
