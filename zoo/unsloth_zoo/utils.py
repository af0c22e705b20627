# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""The names notebooks import from CUDA `unsloth_zoo.utils`, answered on MLX.

`Version` reads a package name, a module or a version text and returns a comparable release (a
`packaging.version.Version` when packaging is installed); the rank helpers read the `mlx.launch` world.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pickle
import re
import sys
from functools import total_ordering
from typing import Any, Callable, Optional, Tuple

__all__ = [
    "Version",
    "_get_dtype",
    "is_main_process",
    "is_distributed",
    "current_rank",
    "distributed_function",
    "distributed_any",
    "torch_distributed_get_rank",
    "get_lock",
    "get_quant_type",
]

_PACKAGE_NAME = re.compile(r"^[A-Za-z](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")


@total_ordering
class ReleaseVersion:
    """A dotted release compared as numbers, for hosts without `packaging`."""

    def __init__(self, text: str) -> None:
        self.release: Tuple[int, ...] = tuple(int(part) for part in text.split("."))

    def _key(self) -> Tuple[int, ...]:
        # 2.0 and 2.0.0 are the same release, as packaging says.
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        return tuple(release)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReleaseVersion) and self._key() == other._key()

    def __lt__(self, other: "ReleaseVersion") -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return ".".join(str(part) for part in self.release)

    def __repr__(self) -> str:
        return f"<Version('{self}')>"

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def minor(self) -> int:
        return self.release[1] if len(self.release) > 1 else 0

    @property
    def micro(self) -> int:
        return self.release[2] if len(self.release) > 2 else 0


def _version_class() -> Any:
    try:
        from packaging.version import Version as PackagingVersion
    except ImportError:
        return ReleaseVersion
    return PackagingVersion


def _installed(name: Optional[str]) -> Optional[str]:
    if not name:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_version(name: str) -> Optional[str]:
    """The `__version__` of the module `name`, imported if it can be found and is not yet."""
    module = sys.modules.get(name)
    if module is None:
        try:
            if importlib.util.find_spec(name) is None:
                return None
            module = importlib.import_module(name)
        except (ImportError, ValueError):
            return None
    raw = getattr(module, "__version__", None)
    return None if raw in (None, "", "unknown") else str(raw)


def _raw_version(value: Any) -> str:
    """The version text `value` stands for: an installed package's, a module's, or the text itself."""
    if isinstance(value, str):
        if not _PACKAGE_NAME.match(value):
            return value
        # A module with no distribution metadata (the MLX install's `trl` stand-in) still carries `__version__`.
        found = _installed(value) or _module_version(value)
        return found if found is not None else value
    name = getattr(value, "__name__", None) or getattr(value, "__package__", None)
    raw = getattr(value, "__version__", None)
    if raw in (None, "", "unknown"):
        raw = _installed(name)
    return str(value) if raw in (None, "") else str(raw)


def parse_release(raw: str) -> str:
    """The dotted release in `raw`; a pre-release or local suffix after it adds `.1` so it sorts above the release."""
    match = _RELEASE.match(raw)
    at_start = match is not None
    if match is None:
        match = _RELEASE.search(raw)
    if match is None:
        raise ValueError(f"no version number in {raw!r}")
    release = match.group(0)
    return f"{release}.1" if at_start and release != raw else release


def Version(version: Any) -> Any:
    """A comparable version of a package name (`"trl"`), a module (`trl`) or a version text (`"0.20.0.dev0"`)."""
    version_class = _version_class()
    if isinstance(version, version_class):
        return version
    try:
        return version_class(parse_release(_raw_version(version)))
    except (ValueError, TypeError) as error:
        raise RuntimeError(f"Unsloth: Could not get version for `{version}`: {error}") from error


def _get_dtype(dtype: Any) -> Any:
    """The MLX dtype a name (`"bfloat16"`) or an MLX dtype stands for; None when it names none."""
    import mlx.core as mx

    if isinstance(dtype, mx.Dtype):
        return dtype
    if isinstance(dtype, str):
        found = getattr(mx, dtype.lower().removeprefix("torch."), None)
        return found if isinstance(found, mx.Dtype) else None
    return None


def _world() -> Any:
    from unsloth_zoo.mlx.distributed import current_world

    return current_world()


def is_distributed() -> bool:
    return bool(_world().is_distributed)


def is_main_process() -> bool:
    return bool(_world().is_main)


def current_rank() -> int:
    return int(_world().rank)


def torch_distributed_get_rank(*_: Any, **__: Any) -> int:
    return current_rank()


def distributed_function(n: int = 1, function: Optional[Callable[..., Any]] = None, *args: Any, **kwargs: Any) -> Any:
    """`function` run on rank 0 and its result given to every rank; alone, it just runs."""
    if function is None:
        raise TypeError("distributed_function needs the function to run")
    world = _world()
    if not world.is_distributed:
        return function(*args, **kwargs)
    import mlx.core as mx
    import numpy as np

    failure: Optional[BaseException] = None
    payload = b""
    if world.is_main:
        try:
            payload = pickle.dumps(function(*args, **kwargs))
        except Exception as error:  # raised below, once the other ranks have been told
            failure = error
    (length,) = world.exchange_status(
        f"distributed_function {getattr(function, '__name__', function)}", failure, [len(payload)]
    )
    if failure is not None:
        raise failure
    # Rank 0 contributes the bytes and every other rank zeros, so the sum is rank 0's bytes.
    data = np.zeros(int(length), dtype=np.int32)
    data[: len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    (summed,) = world.collective("distributed_function result", [mx.array(data)])
    return pickle.loads(summed.astype(np.uint8).tobytes())


def distributed_any(value: Any) -> bool:
    """True when `value` is truthy on any rank; every rank must call it."""
    world = _world()
    if not world.is_distributed:
        return bool(value)
    import mlx.core as mx

    (summed,) = world.collective("distributed_any", [mx.array([1 if value else 0])])
    return bool(summed[0])


def get_lock(target: str, timeout: Optional[int] = None) -> Any:
    """A file lock beside `target` (in `.locks/`); the timeout defaults to UNSLOTH_LOCK_TIMEOUT or 10 seconds."""
    import importlib
    from pathlib import Path

    # Imported by name: filelock comes with huggingface_hub, not with this package.
    file_lock = importlib.import_module("filelock").FileLock
    locks = Path(target).parent / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    seconds = int(os.environ.get("UNSLOTH_LOCK_TIMEOUT", "10")) if timeout is None else timeout
    return file_lock(str(locks / f".lock.{Path(target).name}"), timeout=seconds)


def get_quant_type(config: Any) -> Optional[str]:
    """The `quant_method` of a model config's quantization_config, or None."""
    quantization = getattr(config, "quantization_config", None)
    if not quantization:
        return None
    if isinstance(quantization, dict):
        return quantization.get("quant_method")
    return getattr(quantization, "quant_method", None)
