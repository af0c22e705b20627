"""The commands as others run them: the CI workflow's `run:` steps and the README's quickstart, in a fresh copy.

The copy holds the checkout's tracked and unignored files as they are now, committed into a new git repository, so
nothing built or installed here (no .nox, no .venv-nox, no build/) can make a command pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.checkout_copy import copy_checkout

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_checkout(ROOT, tmp_path_factory.mktemp("fresh") / "checkout")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's bin folder: `python` and `python3` with neither of our packages, as on a runner or a laptop."""
    venv = tmp_path_factory.mktemp("runner") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    return venv / "bin"


def _shell(line: str, cwd: Path, bin_dir: Path, timeout: int, **extra_env: str) -> subprocess.CompletedProcess:
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "UNSLOTH_DATASET_NUM_PROC", "NOX_DEFAULT_VENV_BACKEND"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra_env)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _workflow_steps(job: str) -> tuple[dict, list[str]]:
    import yaml

    workflow = yaml.safe_load(WORKFLOW.read_text())
    return workflow.get("env", {}), [step["run"] for step in workflow["jobs"][job]["steps"] if "run" in step]


def test_the_twin_job_runs_as_written(fresh_copy, bare_python):
    env, steps = _workflow_steps("twin")
    assert steps == ['python -m pip install "nox>=2024.3.2"', "nox -s drift", "nox -s sync", "git diff --exit-code"]
    for step in steps:
        result = _shell(step, fresh_copy, bare_python, 900, CI="true", **env)
        assert result.returncode == 0, f"`{step}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_the_test_job_loads_the_noxfile_with_the_console_script(fresh_copy, bare_python):
    env, steps = _workflow_steps("test")
    assert steps == ['python -m pip install "nox>=2024.3.2"', "nox"]
    install, run_nox = steps
    assert _shell(install, fresh_copy, bare_python, 600, CI="true", **env).returncode == 0
    # The whole default run is this suite and more; listing it loads the noxfile the same way.
    listed = _shell(f"{run_nox} -l", fresh_copy, bare_python, 120, CI="true", **env)
    assert listed.returncode == 0, listed.stderr
    plain = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout)  # the workflow sets FORCE_COLOR
    assert re.search(r"^\* lint ", plain, re.M) and re.search(r"^\* tests ", plain, re.M), plain


def test_python_m_nox_loads_the_noxfile_from_another_folder(fresh_copy, bare_python, tmp_path):
    _shell('python -m pip install "nox>=2024.3.2"', fresh_copy, bare_python, 600)
    listed = _shell(f"python -m nox -f {fresh_copy / 'noxfile.py'} -l", tmp_path, bare_python, 120)
    assert listed.returncode == 0 and "* drift " in listed.stdout, listed.stderr


def _bash_lines(text: str) -> list[str]:
    """Every command line of the ```bash blocks in `text`, comments dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def _quickstart_lines() -> list[str]:
    return _bash_lines(README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0])


DOCS_PAGES = sorted(page for page in (ROOT / "docs").glob("*.md") if "```bash" in page.read_text())
# Lines that need the MLX stack installed run in the `mlx` session instead (tests/mlx_api/with_torch/test_docs_commands.py).
NEEDS_MLX = "UNSLOTH_MLX=1 "


def _as_run_here(line: str) -> str:
    """`dev.py test` and `dev.py bench` include this suite or run for half an hour: they are listed, not run."""
    if not re.match(r"python3 dev\.py (test|bench)\b", line):
        return line
    head, separator, posargs = line.partition(" -- ")
    return f"{head} -l{separator}{posargs}"


def _run_lines(lines: list[str], cwd: Path, bin_dir: Path) -> None:
    for line in lines:
        command = _as_run_here(line)
        result = _shell(command, cwd, bin_dir, 1800)
        assert result.returncode == 0, f"`{command}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, result.stderr


def test_the_readme_quickstart_runs_from_a_fresh_copy(fresh_copy, tmp_path_factory):
    # The README asks for python3 alone: a fresh venv without nox or our packages stands in for it.
    bin_dir = tmp_path_factory.mktemp("laptop") / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(bin_dir)], check=True)
    lines = _quickstart_lines()
    assert lines[:2] == ["python3 dev.py demo", "python3 dev.py test"], lines
    assert any("--version" in line for line in lines)
    for line in lines:
        started = time.monotonic()
        command = _as_run_here(line)
        result = _shell(command, fresh_copy, bin_dir / "bin", 1800)
        assert result.returncode == 0, f"`{command}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, result.stderr
        if line == "python3 dev.py demo":
            assert "installing the packages" in result.stderr and "rows per second" in result.stdout
        if line == "python3 dev.py demo -- --help":
            # The demo's own venv is already installed: the second run skips its installs.
            assert "installs skipped" in result.stderr and "--jsonl" in result.stdout
            assert time.monotonic() - started < 120


@pytest.mark.parametrize("page", DOCS_PAGES, ids=[page.name for page in DOCS_PAGES])
def test_every_docs_page_command_runs_from_a_fresh_copy(page, fresh_copy, bare_python):
    lines = [line for line in _bash_lines(page.read_text()) if not line.startswith(NEEDS_MLX)]
    _run_lines(lines, fresh_copy, bare_python)


def test_the_docs_listing_rewrites_only_the_long_commands():
    assert (
        _as_run_here("python3 dev.py test -s lock -- --install-only")
        == "python3 dev.py test -s lock -l -- --install-only"
    )
    assert _as_run_here("python3 dev.py bench") == "python3 dev.py bench -l"
    assert _as_run_here("python3 dev.py demo -- --help") == "python3 dev.py demo -- --help"


@pytest.mark.parametrize("editable", [True, False], ids=["editable", "regular"])
def test_the_root_does_not_shadow_the_installed_packages(fresh_copy, tmp_path, editable):
    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True)
    sources = ["-e", "zoo", "-e", "unsloth"] if editable else ["./zoo", "./unsloth"]
    install = _shell(f"python -m pip install --quiet --no-deps {' '.join(sources)}", fresh_copy, venv / "bin", 600)
    assert install.returncode == 0, install.stderr
    # Run from the root, whose unsloth/ folder (the distribution) could pass for an empty namespace package.
    probe = (
        "import unsloth, unsloth_zoo, unsloth_studio, unsloth_num_proc; print(unsloth.__file__, unsloth_zoo.__file__)"
    )
    result = _shell(f'python -c "{probe}"', fresh_copy, venv / "bin", 120)
    assert result.returncode == 0, result.stderr
    unsloth_file, zoo_file = (Path(name) for name in result.stdout.split())
    where = fresh_copy if editable else venv
    assert unsloth_file.name == "__init__.py" and unsloth_file.is_relative_to(where)
    assert zoo_file.name == "__init__.py" and zoo_file.is_relative_to(where)
