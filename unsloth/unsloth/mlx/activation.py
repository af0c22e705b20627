# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Switch `unsloth` onto the MLX backend when the zoo's gate says so, without importing torch, trl or transformers.

Only import hooks are registered here: `torch` gets its CUDA shims, `transformers`' `BatchEncoding` its `.to("cuda")`
no-op and its `Trainer` a route to the MLX trainer for an MLX model, and `trl` its SFT patch (or a stand-in when
absent), each when the program itself first imports it. A name
only the MLX path provides, asked for while that path is off, gets an error saying why it is off: an ImportError for
`from unsloth import FastLanguageModel`, an AttributeError for any other lookup (`hasattr`, `getattr(..., None)`).
"""

from __future__ import annotations

import dis
import importlib
import sys
from types import ModuleType
from typing import Optional

from ..import_hooks import import_hooks

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
    importlib.import_module("unsloth.mlx.compat.torch_shims").apply_torch_shims(torch)


def _patch_batch_encoding(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.torch_shims").apply_batch_encoding_shim(module)


def _patch_batch_feature(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.torch_shims").apply_batch_feature_shim(module)


def _route_trainers(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.transformers_trainer").route_trainers(module)


def _route_pipeline(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.asr_pipeline").route_pipeline(module)


def _route_sentence_transformers(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.sentence_transformers_trainer").route_sentence_transformers(module)


def _register_torch_habits(methods: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.torch_habits")


def _patch_trl(trl: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.trl_shim").patch_trl(trl)


def _fill_trl_stand_in(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.trl_shim").fill_stand_in(module)


def _patch_trl_vllm_check(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.vllm_stand_in").patch_trl_vllm_check(module)


def _fill_torchao_stand_in(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.torchao_stand_in").fill_torchao(module)


def _patch_torchao(module: ModuleType) -> None:
    importlib.import_module("unsloth.mlx.compat.torchao_stand_in").patch_torchao_quantize(module)


def install_shims() -> None:
    """Register every shim; idempotent, and a module already imported is patched at once."""
    hooks = import_hooks()
    hooks.stand_in("trl", _fill_trl_stand_in)
    hooks.after_import("trl", _patch_trl)
    hooks.after_import(TOKENIZATION_MODULE, _patch_batch_encoding)
    hooks.after_import("transformers.feature_extraction_utils", _patch_batch_feature)
    hooks.after_import("torch", _patch_torch)
    # transformers' Trainer given an MLX model: the real class with torch, its placeholder without.
    hooks.after_import("transformers.trainer", _route_trainers)
    hooks.after_import("transformers.utils.dummy_pt_objects", _route_trainers)
    # transformers' speech pipeline given an MLX Whisper transcribes on MLX.
    hooks.after_import("transformers.pipelines", _route_pipeline)
    # sentence-transformers' trainer given an MLX embedding model (6.x's module, then the older one).
    for name in ("sentence_transformers.sentence_transformer.trainer", "sentence_transformers.trainer"):
        hooks.after_import(name, _route_sentence_transformers)
    # Every model loaded from here on answers torch's `parameters()`, `.dtype` and `.to()` (compat.torch_habits).
    hooks.after_import("unsloth.mlx.models.methods", _register_torch_habits)
    # The QAT notebooks' convert cell: torchao's `quantize_` and `QATConfig`, a stand-in when torchao is absent.
    for name in ("torchao", "torchao.quantization", "torchao.quantization.qat"):
        hooks.stand_in(name, _fill_torchao_stand_in)
    hooks.after_import("torchao", _patch_torchao)
    hooks.after_import("torchao.quantization", _patch_torchao)
    # `from vllm import SamplingParams` gets a stand-in, while availability checks still see no vLLM.
    importlib.import_module("unsloth.mlx.compat.vllm_stand_in").install_vllm_stand_in()
    hooks.after_import("trl.import_utils", _patch_trl_vllm_check)
    # The speech notebooks' cloned or pip-installed codecs, when absent, are named with where they come from.
    importlib.import_module("unsloth.mlx.compat.network_modules").install_network_module_finder()


def activate() -> bool:
    """Install the shims when the MLX backend is on; returns whether it is."""
    if not mlx_backend_enabled():
        return False
    install_shims()
    return True


SWITCH = "UNSLOTH_MLX"


def message(name: str, reason: str) -> str:
    return (
        f"cannot import name {name!r} from 'unsloth': it comes from the MLX path, which is off here ({reason}). "
        f"Set {SWITCH}=1 (with mlx and unsloth_zoo installed) to switch it on, or use the CUDA build of unsloth"
    )


def _caller_is_from_import(depth: int = 3) -> bool:
    """True when the frame asking for the attribute is executing a `from unsloth import ...` statement."""
    try:
        frame: Optional[object] = sys._getframe(depth)
        code = frame.f_code.co_code  # type: ignore[union-attr]
        return dis.opname[code[frame.f_lasti]] == "IMPORT_FROM"  # type: ignore[union-attr]
    except (ValueError, IndexError, AttributeError):
        return False


def missing_name_error(name: str, reason: str) -> Exception:
    kind = ImportError if _caller_is_from_import() else AttributeError
    error = kind(message(name, reason))
    if isinstance(error, ImportError):
        error.name = "unsloth"
    return error
