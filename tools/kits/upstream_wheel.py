"""CUDA Unsloth's published source, read as text from its PyPI wheel at one pinned version, to test against.

Tests read upstream's tables and signatures from here (parsed, never imported: upstream imports torch at the top), so
a name upstream adds at the pinned version shows up as a failing row. The wheel is downloaded once with pip into
`~/.cache/unsloth-mlx/upstream/`; `UNSLOTH_UPSTREAM_WHEEL` points at a wheel already on disk instead.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

UPSTREAM_VERSION = "2026.10.9"
WHEEL_VARIABLE = "UNSLOTH_UPSTREAM_WHEEL"


def _cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "unsloth-mlx" / "upstream"


@functools.lru_cache(maxsize=None)
def upstream_wheel() -> Path:
    """The pinned `unsloth` wheel's path, downloaded (no dependencies) the first time."""
    given = os.environ.get(WHEEL_VARIABLE)
    if given:
        return Path(given)
    folder = _cache_folder()
    name = f"unsloth-{UPSTREAM_VERSION}-py3-none-any.whl"
    if not (folder / name).exists():
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder)]
        result = subprocess.run([*command, f"unsloth=={UPSTREAM_VERSION}"], capture_output=True, text=True)
        if result.returncode != 0 or not (folder / name).exists():
            raise RuntimeError(
                f"could not download unsloth=={UPSTREAM_VERSION} from PyPI ({result.stderr.strip()[-300:]}); "
                f"set {WHEEL_VARIABLE} to a copy of {name}"
            )
    return folder / name


@functools.lru_cache(maxsize=None)
def upstream_source(path: str) -> str:
    """The text of `path` inside the wheel, for example `unsloth/chat_templates.py`."""
    with zipfile.ZipFile(upstream_wheel()) as wheel:
        return wheel.read(path).decode("utf-8")
