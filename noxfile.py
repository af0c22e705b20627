"""Every task this project runs: `nox -l` lists them, `nox` runs the default ones (what CI runs)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["tests", "drift", "matrix", "datasets", "mlx", "mlx_trl", "mlx_torch", "trl", "llama_cpp"]

ROOT = Path(__file__).parent
DATASETS_VERSIONS = json.loads((ROOT / "shared" / "datasets_versions.json").read_text())["versions"]
RUNTIME_DEPS = ["datasets", "tokenizers", "psutil"]
MLX_DEPS = [*RUNTIME_DEPS, "mlx[cpu]", "mlx-lm", "transformers", "gguf", "pytest"]
# llama.cpp for the GGUF reload test, built from its Python binding's source distribution and kept.
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
# The binding needs only the library; llama.cpp's programs, tests and the multimodal part are not built.
LLAMA_CPP_UNUSED_PARTS = (
    "LLAVA_BUILD", "LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_SERVER", "LLAMA_BUILD_TOOLS",
)
LLAMA_CPP_CMAKE_ARGS = " ".join(f"-D{part}=OFF" for part in LLAMA_CPP_UNUSED_PARTS)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the whole pytest suite against both packages."""
    _install_packages(session, *RUNTIME_DEPS, "numpy", "pytest", "libcst", "jinja2", "hypothesis")
    session.run(
        "pytest", "--ignore=tests/mlx_backend", "--ignore=tests/mlx_api", "--ignore=tests/trl_real", *session.posargs
    )


@nox.session
def drift(session: nox.Session) -> None:
    """Fail if unsloth's generated policy copy differs in meaning from the zoo's."""
    session.run("python", "tools/drift.py", *session.posargs)


@nox.session(default=False)
def sync(session: nox.Session) -> None:
    """Regenerate unsloth's policy copy from the zoo's (`-- --check` writes nothing)."""
    session.install("libcst")
    session.run("python", "tools/sync_twin.py", *session.posargs)


@nox.session
def matrix(session: nox.Session) -> None:
    """Evaluate the policy on every cell of the simulated host matrix and check its invariants."""
    _install_packages(session, "numpy")
    session.run("python", "tools/host_matrix.py", *session.posargs)


@nox.session
@nox.parametrize("datasets_version", DATASETS_VERSIONS)
def datasets(session: nox.Session, datasets_version: str) -> None:
    """Prove, on each supported datasets release, which num_proc values build a worker pool."""
    _install_packages(session, f"datasets=={datasets_version}", "tokenizers", "psutil", "pytest")
    session.run("pytest", "-p", "no:cacheprovider", "tests/datasets_contract", *session.posargs)


@nox.session
def mlx(session: nox.Session) -> None:
    """Train tiny models on the MLX backend and its public API (mlx[cpu] on Linux), torch and trl absent."""
    _install_packages(session, *MLX_DEPS)
    session.run(
        "pytest", "tests/mlx_backend", "tests/mlx_api", "--ignore=tests/mlx_api/with_torch",
        "--ignore=tests/mlx_api/with_llama_cpp", "--expect-trl=absent",
        *session.posargs,
    )


@nox.session
def mlx_trl(session: nox.Session) -> None:
    """The TRL shim with trl installed without its dependencies (torch stays absent)."""
    _install_packages(session, *MLX_DEPS)
    session.install("--no-deps", "trl")
    session.run(
        "pytest", "tests/mlx_api/test_trl_shim.py", "tests/mlx_api/test_exports.py", "--expect-trl=installed",
        *session.posargs,
    )


@nox.session
def mlx_torch(session: nox.Session) -> None:
    """CUDA shims, CUDA Unsloth's batch order and the notebook script, with the CPU torch."""
    _install_packages(session, *MLX_DEPS, "torch==2.13.0", "accelerate")
    session.run("pytest", "tests/mlx_api/with_torch", "tests/mlx_api/test_exports.py", *session.posargs)


@nox.session
def trl(session: nox.Session) -> None:
    """The real TRL trainers built through unsloth on a tiny llama (CPU torch): pools spied, then 2 steps each."""
    _install_packages(session, *RUNTIME_DEPS, "trl", "transformers", "torch==2.13.0", "pytest")
    session.run("pytest", "tests/trl_real", *session.posargs)


@nox.session
def llama_cpp(session: nox.Session) -> None:
    """Export the trained tiny model to GGUF and reload it with llama.cpp itself (built once from source, cached)."""
    _install_packages(session, *MLX_DEPS, str(_llama_cpp_wheel(session)))
    session.run("pytest", "tests/mlx_api/with_llama_cpp", *session.posargs)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: tokenize the built-in SFT dataset, sized by the policy, and report the figures."""
    _install_packages(session, *RUNTIME_DEPS)
    session.run("python", "-m", "tools.demo", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmark the policy against every alternative worker count; writes a table, JSON and a plot."""
    # trl, transformers and the CPU torch: the "as a user calls it" column runs trl's SFT preparation.
    _install_packages(session, *RUNTIME_DEPS, "matplotlib", "trl", "transformers", "torch==2.13.0")
    session.run("python", "-m", "tools.bench", *session.posargs)


@nox.session(default=False)
def bench_mlx(session: nox.Session) -> None:
    """Tokens per second of the MLX trainer against mlx_lm's own LoRA trainer on the same tiny model."""
    _install_packages(session, *MLX_DEPS)
    session.run("python", "tools/bench_mlx.py", *session.posargs)


def _install_packages(session: nox.Session, *extra: str) -> None:
    session.install("-e", "zoo", "-e", "unsloth", *extra)


def _llama_cpp_wheel(session: nox.Session) -> Path:
    """The cached llama-cpp-python wheel, built from its sdist the first time (a compile of llama.cpp: minutes)."""
    version = LLAMA_CPP_PYTHON.split("==")[1]
    cache = Path(os.environ.get("UNSLOTH_LLAMA_CPP_WHEELS", Path.home() / ".cache" / "unsloth-mlx"))
    folder = cache / f"llama-cpp-python-{version}"
    found = sorted(folder.glob("llama_cpp_python-*.whl"))
    if found:
        session.log(f"llama.cpp: using the cached wheel {found[-1]}")
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="llama-cpp-wheel-", dir=cache))
    environment = {"CMAKE_ARGS": LLAMA_CPP_CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    start = time.monotonic()
    session.run(
        "python", "-m", "pip", "wheel", "--no-deps", "--no-binary", "llama-cpp-python", LLAMA_CPP_PYTHON,
        "-w", str(staging), env=environment,
    )
    session.log(f"llama.cpp: built {LLAMA_CPP_PYTHON} from source in {time.monotonic() - start:.0f} s")
    (built,) = staging.glob("llama_cpp_python-*.whl")
    # Moved into place only once complete, so an interrupted build is never taken for a cached one.
    folder.mkdir(parents=True, exist_ok=True)
    wheel = Path(shutil.move(str(built), str(folder / built.name)))
    shutil.rmtree(staging, ignore_errors=True)
    return wheel
