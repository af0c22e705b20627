"""The test sessions' BLAS under MLX: MKL preloaded where its wheel exists and is installed, else MLX's own."""

from __future__ import annotations

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


def test_every_mlx_session_but_the_memory_checking_one_runs_its_tests_with_it():
    from pathlib import Path

    noxfile = (Path(__file__).resolve().parent.parent / "noxfile.py").read_text()

    def body(session: str) -> str:
        return noxfile.split(f"\ndef {session}(session: nox.Session) -> None:", 1)[1].split("\n@nox.session", 1)[0]

    for session in ("mlx_trl", "mlx_torch", "llama_cpp"):
        assert "env=_mlx_blas(session)" in body(session), session
    # The mlx session runs under MKL but for the checks marked as measured on the bundled BLAS, in a call of their own.
    mlx = body("mlx")
    assert mlx.count("env=_mlx_blas(session)") == 1 and mlx.count("session.run(") == 2
    assert 'f"not {mlx_test_blas.REFERENCE_MARK}"' in mlx


def test_a_check_measured_on_the_reference_blas_gets_an_environment_without_mkl():
    environ = {
        "LD_PRELOAD": "/venv/lib/libmkl_rt.so.2 /opt/other.so",
        "MKL_THREADING_LAYER": "SEQUENTIAL",
        "MKL_NUM_THREADS": "1",
        "PATH": "/bin",
    }
    assert mlx_test_blas.reference(environ) == {"LD_PRELOAD": "/opt/other.so", "PATH": "/bin"}
    assert mlx_test_blas.reference({"LD_PRELOAD": "/venv/lib/libmkl_rt.so.2", "PATH": "/bin"}) == {"PATH": "/bin"}
