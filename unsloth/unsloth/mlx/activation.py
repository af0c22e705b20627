# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Switch `unsloth` onto the MLX backend when the zoo's gate says so, without importing torch, trl or transformers.

Only import hooks are registered here: `torch` gets its CUDA shims, `transformers`' `BatchEncoding` its `.to("cuda")`
no-op, and `trl` its SFT patch (or a stand-in when absent), each when the program itself first imports it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .import_hooks import import_hooks

TOKENIZATION_MODULE = "transformers.tokenization_utils_base"


def mlx_backend_enabled() -> bool:
    """The zoo's gate decision; False when the installed zoo predates the MLX backend."""
    try:
        from unsloth_zoo.mlx.gate import use_mlx_backend
    except ImportError:
        return False
    return use_mlx_backend()


def gate_reason() -> str:
    """Why the MLX path is on or off here, in the gate's own words (or why the gate could not be asked)."""
    try:
        from unsloth_zoo.mlx.gate import decide_backend
    except ImportError as error:
        return f"unsloth_zoo with its MLX backend is not installed ({error})"
    return decide_backend().reason


def _patch_torch(torch: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.torch_shims").apply_torch_shims(torch)


def _patch_batch_encoding(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.torch_shims").apply_batch_encoding_shim(module)


def _patch_trl(trl: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.trl_shim").patch_trl(trl)


def _fill_trl_stand_in(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.trl_shim").fill_stand_in(module)


def install_shims() -> None:
    """Register every shim; idempotent, and a module already imported is patched at once."""
    hooks = import_hooks()
    hooks.stand_in("trl", _fill_trl_stand_in)
    hooks.after_import("trl", _patch_trl)
    hooks.after_import(TOKENIZATION_MODULE, _patch_batch_encoding)
    hooks.after_import("torch", _patch_torch)


def activate() -> bool:
    """Install the shims when the MLX backend is on; returns whether it is."""
    if not mlx_backend_enabled():
        return False
    install_shims()
    return True
