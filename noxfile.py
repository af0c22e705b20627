"""Every task this project runs: `nox -l` lists them, `nox` runs the default ones (what CI runs)."""

from __future__ import annotations

import json
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["tests", "drift", "matrix", "datasets", "mlx", "mlx_trl", "mlx_torch"]

ROOT = Path(__file__).parent
DATASETS_VERSIONS = json.loads((ROOT / "shared" / "datasets_versions.json").read_text())["versions"]
RUNTIME_DEPS = ["datasets", "tokenizers", "psutil"]
MLX_DEPS = [*RUNTIME_DEPS, "mlx[cpu]", "mlx-lm", "transformers", "pytest"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the whole pytest suite against both packages."""
    _install_packages(session, *RUNTIME_DEPS, "numpy", "pytest", "libcst", "jinja2", "hypothesis")
    session.run("pytest", "--ignore=tests/mlx_backend", "--ignore=tests/mlx_api", *session.posargs)


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
        "pytest", "tests/mlx_backend", "tests/mlx_api", "--ignore=tests/mlx_api/with_torch", "--expect-trl=absent",
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
    _install_packages(session, *MLX_DEPS, "torch==2.13.0")
    session.run("pytest", "tests/mlx_api/with_torch", "tests/mlx_api/test_exports.py", *session.posargs)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: tokenize the built-in SFT dataset, sized by the policy, and report the figures."""
    _install_packages(session, *RUNTIME_DEPS)
    session.run("python", "-m", "tools.demo", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmark the policy against every alternative worker count; writes a table, JSON and a plot."""
    _install_packages(session, *RUNTIME_DEPS, "matplotlib")
    session.run("python", "-m", "tools.bench", *session.posargs)


@nox.session(default=False)
def bench_mlx(session: nox.Session) -> None:
    """Tokens per second of the MLX trainer against mlx_lm's own LoRA trainer on the same tiny model."""
    _install_packages(session, *MLX_DEPS)
    session.run("python", "tools/bench_mlx.py", *session.posargs)


def _install_packages(session: nox.Session, *extra: str) -> None:
    session.install("-e", "zoo", "-e", "unsloth", *extra)
