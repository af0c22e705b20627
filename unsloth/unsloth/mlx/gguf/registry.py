# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Every family's converter, collected from the modules of `converters/`; `convert` looks a model's type up here.

The pattern, for text converters and any other kind (projectors) alike:
- a module of the package defines a module-level `CONVERTERS` dict, key (a config's `model_type`) -> entry;
- `collect(package)` imports every module of the package and merges their dicts, refusing a key listed twice;
- adding a family is adding (or editing) its own module: nothing else lists the families;
- a sentence-embedding model's entries sit in `EMBEDDING_CONVERTERS` instead, since Qwen3-Embedding and
  EmbeddingGemma share their `model_type` with the text models but not their llama.cpp form.
A text entry is a `converters.base.Converter`: its hooks default to the common path, and a family overrides only
those where it differs (refusals, weight preparation, tensor names and splits, rope tensors, keys).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any, Dict

from .families import Family


def collect(package: str, attribute: str = "CONVERTERS") -> Dict[str, Any]:
    """Each module's `attribute` dict under `package` (a dotted name), merged; a key two modules list is an error."""
    found: Dict[str, Any] = {}
    where: Dict[str, str] = {}
    root = importlib.import_module(package)
    for module_info in sorted(pkgutil.iter_modules(root.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{package}.{module_info.name}")
        for key, entry in getattr(module, attribute, {}).items():
            if key in found:
                raise RuntimeError(f"{key!r} is registered by both {where[key]} and {module.__name__}")
            found[key], where[key] = entry, module.__name__
    return found


@functools.lru_cache(maxsize=1)
def text_converters() -> Dict[str, Any]:
    """model_type -> its `Converter`, for every text family this exporter writes."""
    return collect(f"{__package__}.converters")


@functools.lru_cache(maxsize=1)
def embedding_converters() -> Dict[str, Any]:
    """model_type -> its `Converter` for a sentence-embedding export (`EMBEDDING_CONVERTERS`: the pooled states)."""
    return collect(f"{__package__}.converters", "EMBEDDING_CONVERTERS")


def converter_for(model_type: str) -> Any:
    """The registered converter of a model type, or None."""
    return text_converters().get(model_type)


def families() -> Dict[str, Family]:
    """model_type -> its listed `Family` (the architecture and flags)."""
    return {model_type: entry.family for model_type, entry in text_converters().items()}


FAMILIES = families()
