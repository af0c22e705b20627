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

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _mlx_lines(page: Path) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("UNSLOTH_MLX=1 ")]


LINES = [(page, line) for page in PAGES for line in _mlx_lines(page)]


def test_the_docs_hold_mlx_commands_to_run():
    assert LINES, "no `UNSLOTH_MLX=1` command line found in the README or docs/"


@pytest.mark.parametrize(("page", "line"), LINES, ids=[f"{page.name}:{line[:60]}" for page, line in LINES])
def test_the_mlx_command_line_runs_as_written(page, line):
    # `python` in the line is this session's interpreter, as it is for a user inside their venv.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(["bash", "-c", line], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{page.name}: `{line}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
