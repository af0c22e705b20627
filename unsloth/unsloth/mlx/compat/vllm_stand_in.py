# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`from vllm import SamplingParams` on MLX, where vLLM cannot be installed, while vLLM still reads as absent.

A finder placed after the real ones (an installed vLLM always wins) builds a `vllm` stand-in only for an import
statement. Availability probes are told the truth: `importlib.util.find_spec("vllm")` gets None from this finder
(it recognises that caller on the stack), `importlib.metadata.version("vllm")` finds no distribution since none is
installed, and TRL's `is_vllm_available` answers False even after the stand-in was imported, since a module in
`sys.modules` would otherwise be reported by `find_spec`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any, Optional

NAME = "vllm"
STAND_IN_MARK = "__unsloth_mlx_stand_in__"
# Frames whose code asks whether a module exists rather than importing it.
_PROBES = {importlib.util.find_spec.__code__}


def _probing(depth_limit: int = 40) -> bool:
    frame: Optional[Any] = sys._getframe(2)
    for _ in range(depth_limit):
        if frame is None:
            return False
        if frame.f_code in _PROBES:
            return True
        frame = frame.f_back
    return False


def fill_vllm(module: ModuleType) -> None:
    from ..models.fast_inference import CompletionOutput, LoRARequest, RequestOutput, SamplingParams

    module.__path__ = []
    module.SamplingParams = SamplingParams
    module.RequestOutput = RequestOutput
    module.CompletionOutput = CompletionOutput
    module.LoRARequest = LoRARequest
    module.__all__ = ["SamplingParams", "RequestOutput", "CompletionOutput", "LoRARequest"]
    setattr(module, STAND_IN_MARK, True)


def _fill_lora_request(module: ModuleType) -> None:
    from ..models.fast_inference import LoRARequest

    module.LoRARequest = LoRARequest


# The stand-in's modules: `vllm` and the one submodule notebooks import from (`vllm.lora.request`).
_FILLS = {
    NAME: fill_vllm,
    f"{NAME}.lora": lambda module: setattr(module, "__path__", []),
    f"{NAME}.lora.request": _fill_lora_request,
}


class _Loader:
    def __init__(self, fill: Any) -> None:
        self._fill = fill

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        self._fill(module)


class VllmStandInFinder:
    """Last on `sys.meta_path`: reached only when no real vLLM was found, and silent to `find_spec` probes."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        fill = _FILLS.get(fullname)
        if fill is None or _probing():
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fill), is_package=fullname != f"{NAME}.lora.request")

    def invalidate_caches(self) -> None:
        return None


_FINDER = VllmStandInFinder()


def install_vllm_stand_in() -> None:
    """Put the finder at the end of `sys.meta_path`; idempotent."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def _is_stand_in(module: Any) -> bool:
    return bool(getattr(module, STAND_IN_MARK, False))


def patch_trl_vllm_check(module: ModuleType) -> None:
    """TRL's `is_vllm_available`: False while only the stand-in is there (a real vLLM keeps TRL's own check)."""
    original = getattr(module, "is_vllm_available", None)
    if original is None or getattr(original, STAND_IN_MARK, False):
        return

    def is_vllm_available(*args: Any, **kwargs: Any) -> bool:
        if _is_stand_in(sys.modules.get(NAME)) or importlib.util.find_spec(NAME) is None:
            return False
        return original(*args, **kwargs)

    setattr(is_vllm_available, STAND_IN_MARK, True)
    module.is_vllm_available = is_vllm_available
