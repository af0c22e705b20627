"""The BLAS under MLX in the test sessions: Intel's MKL instead of the reference BLAS the `mlx[cpu]` wheel bundles.

On Linux, `mlx[cpu]` calls `cblas_sgemm` from netlib's reference BLAS, about 2.7 GFLOPS on one core here against
44 with MKL, and the tiny models' training steps are nearly all matmuls. Preloading MKL's single-dynamic library
makes MLX bind that symbol to MKL instead (one thread each, so the lanes and xdist workers never oversubscribe the
cores). What the tests check is this project's code, which calls the same MLX ops either way; set
`UNSLOTH_TEST_BLAS=reference` to run a session on the bundled BLAS. Benchmarks never use this: their tables
compare against mlx-lm on the stack users install.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Mapping

MKL = "mkl==2025.0.1"
OPT_OUT_VARIABLE = "UNSLOTH_TEST_BLAS"
LIBRARY = "libmkl_rt.so.2"
# The pytest mark of a check whose bound holds on the bundled BLAS only; the mlx session runs those in a second call.
REFERENCE_MARK = "reference_blas"


def wanted(environ: Mapping[str, str] = os.environ, system: str = "", machine: str = "") -> bool:
    """MKL's wheels exist for Linux on x86_64 only; elsewhere (and when opted out) MLX keeps its own BLAS."""
    system, machine = system or platform.system(), machine or platform.machine()
    return environ.get(OPT_OUT_VARIABLE, "mkl") != "reference" and system == "Linux" and machine in ("x86_64", "AMD64")


def environment(venv: str | Path, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables that put MKL under MLX in every process of a session run from `venv`; empty when not wanted
    or not installed there (the wheel puts the library in the venv's `lib/`)."""
    library = Path(venv) / "lib" / LIBRARY
    if not wanted(environ) or not library.is_file():
        return {}
    preload = " ".join(part for part in (str(library), environ.get("LD_PRELOAD", "")) if part)
    return {"LD_PRELOAD": preload, "MKL_THREADING_LAYER": "SEQUENTIAL", "MKL_NUM_THREADS": "1"}


def reference(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without MKL under MLX, for a check whose bounds were measured on the reference BLAS's sums (MKL picks
    its kernels, and so the order of its sums, by each product's shape)."""
    kept = {key: value for key, value in environ.items() if not key.startswith("MKL_")}
    preload = " ".join(part for part in environ.get("LD_PRELOAD", "").split() if not part.endswith(LIBRARY))
    kept.pop("LD_PRELOAD", None)
    return {**kept, "LD_PRELOAD": preload} if preload else kept
