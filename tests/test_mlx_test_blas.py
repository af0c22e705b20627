"""The test sessions' BLAS under MLX: MKL preloaded where its wheel exists and is installed, else MLX's own."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest

from tools import mlx_test_blas


def _venv_with_mkl(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / mlx_test_blas.LIBRARY).write_bytes(b"")
    return tmp_path


def test_mkl_is_wanted_on_linux_x86_64_only_and_not_when_opted_out():
    assert mlx_test_blas.wanted({}, "Linux", "x86_64")
    assert not mlx_test_blas.wanted({}, "Linux", "aarch64")  # no MKL wheel there
    assert not mlx_test_blas.wanted({}, "Darwin", "arm64")  # a Mac's MLX uses Accelerate
    assert not mlx_test_blas.wanted({"UNSLOTH_TEST_BLAS": "reference"}, "Linux", "x86_64")


def test_an_installed_mkl_is_preloaded_single_threaded_before_any_earlier_preload(tmp_path, monkeypatch):
    monkeypatch.setattr(mlx_test_blas.platform, "system", lambda: "Linux")
    monkeypatch.setattr(mlx_test_blas.platform, "machine", lambda: "x86_64")
    venv = _venv_with_mkl(tmp_path)
    found = mlx_test_blas.environment(venv, {"LD_PRELOAD": "/opt/other.so"})
    assert found == {
        "LD_PRELOAD": f"{venv / 'lib' / 'libmkl_rt.so.2'} /opt/other.so",
        "MKL_THREADING_LAYER": "SEQUENTIAL",
        "MKL_NUM_THREADS": "1",
    }
    assert mlx_test_blas.environment(venv, {"UNSLOTH_TEST_BLAS": "reference"}) == {}
    assert mlx_test_blas.environment(tmp_path / "no-venv", {}) == {}  # not installed: MLX's bundled BLAS


ROOT = Path(__file__).resolve().parent.parent
# Its check holds the probe's peak within 3% of the step's, measured on the bundled BLAS; with MKL one run in seven
# came out 3.6% apart, so it is marked to run without MKL.
MEMORY_GUARD = "tests/mlx_backend/test_memory_guard.py"
MEMORY_GUARD_CHECK = "test_the_check_measures_the_pass_the_step_will_run"
MLX_SESSIONS = ("mlx", "mlx_trl", "mlx_torch", "llama_cpp")


class _RecordingSession:
    """nox's `Session` as far as the MLX sessions use it: installs and runs are recorded, and nothing runs."""

    def __init__(self, venv: Path) -> None:
        self.virtualenv = SimpleNamespace(location=str(venv))
        self.bin = str(Path(sys.executable).parent)
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.installs: list[tuple[str, ...]] = []
        self.runs: list[tuple[tuple[str, ...], Optional[dict]]] = []

    def install(self, *arguments: str, **settings: object) -> None:
        self.installs.append(arguments)

    def run(self, *arguments: str, env: Optional[dict] = None, **settings: object) -> str:
        self.runs.append((arguments, env))
        return ""

    def log(self, *arguments: object, **settings: object) -> None:
        pass

    warn = log


def _nox_stand_in() -> types.ModuleType:
    """The `nox` module's decorators and settings as the noxfile uses them at import (nox is not in the test venvs)."""
    nox = types.ModuleType("nox")
    nox.__dict__.update(
        session=lambda function=None, **settings: function or (lambda decorated: decorated),
        parametrize=lambda *arguments, **settings: lambda decorated: decorated,
        options=SimpleNamespace(),
        Session=object,
        command=SimpleNamespace(CommandFailed=type("CommandFailed", (Exception,), {})),
    )
    return nox


@pytest.fixture(scope="module")
def noxfile():
    """noxfile.py loaded once as a module under the `nox` stand-in (loading it asks pip for its settings: seconds),
    its changes to os.environ and sys.path undone after."""
    saved = dict(os.environ)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "nox", _nox_stand_in())
        patch.setattr(sys, "path", list(sys.path))
        spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            yield module
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _session_venv(root: Path, name: str) -> Path:
    """A venv as nox names it, with MKL's library where its wheel puts it."""
    venv = root / name
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / mlx_test_blas.LIBRARY).write_bytes(b"")
    (venv / "pyvenv.cfg").write_text("version = 3.11.9\n")
    return venv


def _cached_llama_cpp_wheel(root: Path) -> Path:
    """A wheel in the folder the llama_cpp session looks in first, so it builds nothing."""
    script = [sys.executable, str(ROOT / "tools" / "llama_cpp_build.py")]
    name = subprocess.run(script, check=True, capture_output=True, text=True).stdout.strip()
    (root / name).mkdir(parents=True)
    (root / name / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    return root


def _selection(arguments: tuple[str, ...]) -> str:
    """The call's `-m` expression (the last one counts, as in pytest); empty when it selects by no mark."""
    found, previous = "", ""
    for argument in arguments:
        if previous == "-m":
            found = argument
        previous = argument
    return found


def _runs_marked_checks(arguments: tuple[str, ...]) -> bool:
    """Whether a pytest call can run the checks marked as measured on the bundled BLAS."""
    return _selection(arguments) != f"not {mlx_test_blas.REFERENCE_MARK}"


def _carries_mkl(env: Optional[dict], venv: Path) -> bool:
    env = env or {}
    mkl_first = env.get("LD_PRELOAD", "").split()[:1] == [str(venv / "lib" / mlx_test_blas.LIBRARY)]
    return mkl_first and env.get("MKL_NUM_THREADS") == "1" and env.get("MKL_THREADING_LAYER") == "SEQUENTIAL"


def _has_mkl(env: Optional[dict]) -> bool:
    return any(part.endswith(mlx_test_blas.LIBRARY) for part in (env or {}).get("LD_PRELOAD", "").split())


@pytest.mark.parametrize("name", MLX_SESSIONS)
def test_each_mlx_sessions_tests_run_under_mkl_but_the_memory_guard(noxfile, name, tmp_path, monkeypatch):
    monkeypatch.setattr(mlx_test_blas.platform, "system", lambda: "Linux")
    monkeypatch.setattr(mlx_test_blas.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(mlx_test_blas.OPT_OUT_VARIABLE, raising=False)
    monkeypatch.setenv("UNSLOTH_LLAMA_CPP_WHEELS", str(_cached_llama_cpp_wheel(tmp_path / "wheels")))
    venv = _session_venv(tmp_path / "venvs", name)
    session = _RecordingSession(venv)
    getattr(noxfile, name)(session)
    calls = [(arguments, env) for arguments, env in session.runs if "pytest" in arguments[:3]]
    assert calls, f"{name} runs no pytest"
    for arguments, env in calls:
        if _selection(arguments) == mlx_test_blas.REFERENCE_MARK:
            assert not _has_mkl(env), f"{name} runs the checks marked for the bundled BLAS under MKL: {arguments}"
        else:
            assert _carries_mkl(env, venv), f"{name} runs pytest without MKL: {arguments} env={env}"
            runs_guard = any(MEMORY_GUARD.startswith(a.rstrip("/") + "/") or a == MEMORY_GUARD for a in arguments)
            assert not (runs_guard and _runs_marked_checks(arguments)), f"{name} runs marked checks under MKL"
    if name != "mlx" or any(_carries_mkl(env, venv) for _, env in calls):
        assert any(mlx_test_blas.MKL in arguments for arguments in session.installs), f"{name} installs no MKL"


def test_the_memory_guard_check_carries_the_mark_the_sessions_select_by():
    import ast

    tree = ast.parse((ROOT / MEMORY_GUARD).read_text())
    (check,) = [node for node in tree.body if getattr(node, "name", "") == MEMORY_GUARD_CHECK]
    marks = [ast.unparse(decorator) for decorator in check.decorator_list]
    assert f"pytest.mark.{mlx_test_blas.REFERENCE_MARK}" in marks, marks
    assert mlx_test_blas.REFERENCE_MARK in (ROOT / "pytest.ini").read_text()
    assert not _runs_marked_checks(("pytest", "tests/mlx_backend", "-m", f"not {mlx_test_blas.REFERENCE_MARK}"))
    assert _runs_marked_checks(("pytest", "tests/mlx_backend", "-x"))


def test_a_check_measured_on_the_reference_blas_gets_an_environment_without_mkl():
    environ = {
        "LD_PRELOAD": "/venv/lib/libmkl_rt.so.2 /opt/other.so",
        "MKL_THREADING_LAYER": "SEQUENTIAL",
        "MKL_NUM_THREADS": "1",
        "PATH": "/bin",
    }
    assert mlx_test_blas.reference(environ) == {"LD_PRELOAD": "/opt/other.so", "PATH": "/bin"}
    assert mlx_test_blas.reference({"LD_PRELOAD": "/venv/lib/libmkl_rt.so.2", "PATH": "/bin"}) == {"PATH": "/bin"}
