"""How the `llama_cpp` nox session builds llama-cpp-python, and the cache folder named after everything that decides it.

The noxfile builds from these values and CI's cache key hashes this file, so a change here is a new wheel in both.
`python tools/llama_cpp_build.py` prints the folder name for the interpreter that runs it. Standard library only.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from pathlib import Path
from typing import Mapping, Optional, Sequence, TextIO

VERSION = "0.3.36"
REQUIREMENT = f"llama-cpp-python=={VERSION}"
# The bindings need only the libraries: libllama, and libmtmd (LLAVA_BUILD), which reads a GGUF with its mmproj
# projector; llama.cpp's programs and tests are not built.
_BUILT_PARTS = ("LLAVA_BUILD",)
_UNUSED_PARTS = ("LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_SERVER", "LLAMA_BUILD_TOOLS")
# Any x86-64 CPU since Haswell, never the build host's own -march=native: a host that advertises AVX-512 or AMX
# and will not run them kills that build with SIGILL. The AVX2 set is named, not left to ggml's NATIVE=OFF
# defaults (which drop it when SOURCE_DATE_EPOCH is set); other architectures ignore these options.
_CPU_BASELINE = (
    ("GGML_NATIVE", "OFF"),
    *((f"GGML_{feature}", "ON") for feature in ("SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C")),
    *((f"GGML_{feature}", "OFF") for feature in ("AVX_VNNI", "AVX512", "AMX_TILE", "AMX_INT8", "AMX_BF16")),
)
CMAKE_ARGS = " ".join(
    [
        *(f"-D{part}=ON" for part in _BUILT_PARTS),
        *(f"-D{part}=OFF" for part in _UNUSED_PARTS),
        *(f"-D{option}={value}" for option, value in _CPU_BASELINE),
    ]
)
CACHE_VARIABLE = "UNSLOTH_LLAMA_CPP_WHEELS"
RECIPE_FILE = "recipe.txt"
_IMPLEMENTATION_TAGS = {"cpython": "cp", "pypy": "pp"}


def python_tag(implementation: str, version: Sequence[int]) -> str:
    """The interpreter's wheel tag, `cp312` for CPython 3.12."""
    return f"{_IMPLEMENTATION_TAGS.get(implementation, implementation)}{version[0]}{version[1]}"


def folder_name(tag: str, platform: str, *, version: str = VERSION, cmake_args: str = CMAKE_ARGS) -> str:
    """Version, Python tag, platform and a digest of the full CMAKE_ARGS: a wheel built any other way never matches."""
    digest = hashlib.sha256(cmake_args.encode()).hexdigest()[:16]
    return f"llama-cpp-python-{version}-{tag}-{platform}-cmake-{digest}"


def this_folder_name() -> str:
    """The folder name for the interpreter running this code."""
    return folder_name(python_tag(sys.implementation.name, sys.version_info), sysconfig.get_platform())


def cache_root(environ: Mapping[str, str], home: Path) -> Path:
    """Where the wheel folders live: `$UNSLOTH_LLAMA_CPP_WHEELS`, else ~/.cache/unsloth-mlx (CI caches that one)."""
    return Path(environ.get(CACHE_VARIABLE) or home / ".cache" / "unsloth-mlx")


def cached_wheel(folder: Path) -> Optional[Path]:
    """The wheel kept in exactly this folder, if any; folders of other versions, flags or hosts are never read."""
    found = sorted(folder.glob("llama_cpp_python-*.whl"))
    return found[-1] if found else None


def recipe_text(name: str) -> str:
    """What a wheel folder's recipe.txt says: the folder name spelled out, CMAKE_ARGS in full."""
    return f"{name}\nrequirement: {REQUIREMENT}\nCMAKE_ARGS={CMAKE_ARGS}\n"


def main(argv: Sequence[str], stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    if argv:
        print("usage: python tools/llama_cpp_build.py  (prints this interpreter's wheel folder name)", file=stderr)
        return 2
    print(this_folder_name(), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
