"""The llama.cpp wheel's recipe and cache folder: a wheel built another way (natively, by an earlier run) is never used.

The `llama_cpp` nox session asks the session's interpreter for the folder name (`python tools/llama_cpp_build.py`)
and takes the wheel in that folder alone; CI's cache key hashes the same file.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tools import llama_cpp_build
from tools.llama_cpp_build import CACHE_VARIABLE, CMAKE_ARGS, VERSION, cache_root, cached_wheel, folder_name, python_tag

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "llama_cpp_build.py"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
WHEEL = f"llama_cpp_python-{VERSION}-py3-none-linux_x86_64.whl"


def _folder_for_this_python(cache: Path) -> Path:
    """As the noxfile finds it: the script run by an interpreter names the folder under the cache root."""
    name = subprocess.run([sys.executable, str(SCRIPT)], check=True, capture_output=True, text=True).stdout.strip()
    return cache_root({CACHE_VARIABLE: str(cache)}, Path("/nonexistent-home")) / name


def _plant(folder: Path) -> Path:
    folder.mkdir(parents=True)
    wheel = folder / WHEEL
    wheel.write_bytes(b"a wheel built with GGML_NATIVE=ON on another host")
    return wheel


def test_a_wheel_in_the_old_native_folder_is_not_picked(tmp_path):
    # Before the recipe named its folder, every build of this version went here, natively compiled.
    _plant(tmp_path / f"llama-cpp-python-{VERSION}")
    folder = _folder_for_this_python(tmp_path)
    assert folder.parent == tmp_path
    assert cached_wheel(folder) is None


def test_a_wheel_in_this_recipes_folder_is_picked(tmp_path):
    wheel = _plant(_folder_for_this_python(tmp_path))
    assert cached_wheel(wheel.parent) == wheel


def test_the_folder_names_the_version_python_and_platform(tmp_path):
    name = _folder_for_this_python(tmp_path).name
    tag = f"{'cp' if sys.implementation.name == 'cpython' else 'pp'}{sys.version_info[0]}{sys.version_info[1]}"
    assert name.startswith(f"llama-cpp-python-{VERSION}-{tag}-{sysconfig.get_platform()}-cmake-")
    assert python_tag("pypy", (3, 10)) == "pp310"


@pytest.mark.parametrize("index", range(len(CMAKE_ARGS.split())))
def test_flipping_any_flag_changes_the_folder(index):
    arguments = CMAKE_ARGS.split()
    option, value = arguments[index].split("=")
    arguments[index] = f"{option}={'ON' if value == 'OFF' else 'OFF'}"
    changed = folder_name("cp312", "linux-x86_64", cmake_args=" ".join(arguments))
    assert changed != folder_name("cp312", "linux-x86_64")


def test_an_added_flag_version_python_or_platform_changes_the_folder():
    base = folder_name("cp312", "linux-x86_64")
    others = {
        folder_name("cp312", "linux-x86_64", cmake_args=f"{CMAKE_ARGS} -DGGML_CPU_ALL_VARIANTS=ON"),
        folder_name("cp312", "linux-x86_64", version="0.3.37"),
        folder_name("cp313", "linux-x86_64"),
        folder_name("cp312", "linux-aarch64"),
    }
    assert base not in others and len(others) == 4


def test_the_recipe_is_portable():
    options = dict(argument.removeprefix("-D").split("=") for argument in CMAKE_ARGS.split())
    assert options["GGML_NATIVE"] == "OFF"
    assert all(options[f"GGML_{feature}"] == "ON" for feature in ("AVX", "AVX2", "FMA", "F16C"))
    assert all(options[f"GGML_{feature}"] == "OFF" for feature in ("AVX512", "AMX_TILE", "AMX_INT8"))


def test_the_recipe_builds_the_multimodal_library():
    # libmtmd reads a vision model's GGUF with its mmproj file; the programs stay unbuilt.
    options = dict(argument.removeprefix("-D").split("=") for argument in CMAKE_ARGS.split())
    assert options["LLAVA_BUILD"] == "ON" and options["LLAMA_BUILD_TOOLS"] == "OFF"


def test_the_cache_root_follows_the_variable():
    home = Path("/home/someone")
    assert cache_root({}, home) == home / ".cache" / "unsloth-mlx"
    assert cache_root({CACHE_VARIABLE: "/wheels"}, home) == Path("/wheels")


def test_the_script_prints_one_name_and_refuses_arguments():
    out, err = io.StringIO(), io.StringIO()
    assert llama_cpp_build.main([], stdout=out, stderr=err) == 0
    assert out.getvalue().startswith("llama-cpp-python-") and out.getvalue().count("\n") == 1
    assert llama_cpp_build.main(["--anything"], stdout=out, stderr=err) == 2
    assert err.getvalue().startswith("usage:")


def test_the_noxfile_builds_from_the_recipe_without_pips_wheel_cache():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_llama_cpp_wheel"]
    strings = {node.value for node in ast.walk(function) if isinstance(node, ast.Constant)}
    names = {node.attr for node in ast.walk(function) if isinstance(node, ast.Attribute)}
    assert "--no-cache-dir" in strings
    assert {"CMAKE_ARGS", "REQUIREMENT", "cache_root", "cached_wheel"} <= names
    assert not any(VERSION in value for value in strings if isinstance(value, str))


def test_the_ci_cache_key_hashes_the_recipe_and_names_the_host():
    import yaml

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]["steps"]
    (cache,) = [step for step in steps if step.get("uses", "").startswith("actions/cache@")]
    key = cache["with"]["key"]
    for part in ("hashFiles('tools/llama_cpp_build.py')", "runner.os", "runner.arch", "matrix.python-version"):
        assert part in key, key
    assert Path(cache["with"]["path"].replace("~", "/home/x", 1)) == cache_root({}, Path("/home/x"))
