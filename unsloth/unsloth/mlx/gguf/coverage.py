# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whether a model type can be written to GGUF here, and if not why, derived from the libraries.

The architecture comes from the pinned llama.cpp's converter (`llama_cpp_facts`, generated), looked up by the
config's `architectures` or by the class names transformers gives the model type; whether llama.cpp loads it from
the same facts; whether the installed `gguf` package names its tensors from `gguf.MODEL_ARCH_NAMES`; what this
exporter converts from `registry.FAMILIES`. docs/gguf.md's coverage table is rendered from `verdict`.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from . import llama_cpp_facts
from .families import NOTES, TEXT_WRAPPERS
from .registry import FAMILIES

# The class name endings a Hugging Face text or vision-language model takes, most specific first.
_CLASS_ENDINGS = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")
_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")


@dataclass(frozen=True)
class Verdict:
    model_type: str
    architecture: Optional[str]  # what llama.cpp's converter writes for it; None when it takes no such model
    gguf_knows: bool
    llama_cpp_loads: bool
    exported: bool
    reason: str  # why it is refused; empty when exported


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=1)
def _transformers_classes() -> Dict[str, List[str]]:
    """model_type -> its causal LM and image-text-to-text class names, read from transformers' auto mapping as
    text (importing it needs torch)."""
    spec = importlib.util.find_spec("transformers.models.auto.modeling_auto")
    if spec is None or spec.origin is None:
        return {}
    classes: Dict[str, List[str]] = {}
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign) or getattr(node.targets[0], "id", "") not in _MAPPINGS:
            continue
        if not isinstance(node.value, ast.Call) or not node.value.args:
            continue
        for pair in getattr(node.value.args[0], "elts", []):
            model_type, names = ast.literal_eval(pair)
            classes.setdefault(model_type, []).extend([names] if isinstance(names, str) else names)
    return classes


def _config_prefix(model_type: str) -> List[str]:
    """transformers' config class without `Config`, the prefix its model classes mostly share."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:  # without transformers only the model type's own spelling is matched
        return []
    config_class = CONFIG_MAPPING_NAMES.get(model_type, "")
    return [config_class[: -len("Config")]] if config_class.endswith("Config") else []


def _candidates(model_type: str) -> List[str]:
    prefixes = _config_prefix(model_type)
    return [*(p + e for p in prefixes for e in _CLASS_ENDINGS), *_transformers_classes().get(model_type, [])]


def llama_cpp_architecture(model_type: str, class_names: Iterable[str] = ()) -> Optional[str]:
    """The architecture llama.cpp's converter writes for a config of this type (`class_names`: its `architectures`);
    a type mlx-lm remaps is looked up as itself first, then as the type it is read as."""
    converted = llama_cpp_facts.CONVERTED
    for name in [*class_names, *_candidates(model_type)]:
        if name in converted:
            return converted[name]
    for ending in _CLASS_ENDINGS:  # transformers does not know every type mlx-lm does: match the spelling
        for name, architecture in converted.items():
            if name.endswith(ending) and _normal(name[: -len(ending)]) == _normal(model_type):
                return architecture
    remapped = _mlx_lm_remapping().get(model_type)
    return llama_cpp_architecture(remapped) if remapped and remapped != model_type else None


def _mlx_lm_remapping() -> Dict[str, str]:
    try:
        from mlx_lm.utils import MODEL_REMAPPING
    except ImportError:
        return {}
    return dict(MODEL_REMAPPING)


def _gguf_architectures() -> frozenset:
    try:
        import gguf
    except ImportError:
        return frozenset()
    return frozenset(gguf.MODEL_ARCH_NAMES.values())


def verdict(model_type: str, class_names: Iterable[str] = ()) -> Verdict:
    """What happens to a model of this type on `save_pretrained_gguf`, and why."""
    family = FAMILIES.get(model_type)
    if model_type in TEXT_WRAPPERS:  # exported as its language model, whose own type decides (and refuses)
        architecture = llama_cpp_architecture(model_type, class_names)
        gguf_knows, loads = architecture in _gguf_architectures(), architecture in llama_cpp_facts.LOADED
        return Verdict(model_type, architecture, gguf_knows, loads, True, "")
    architecture = family.architecture if family else llama_cpp_architecture(model_type, class_names)
    gguf_knows = architecture in _gguf_architectures()
    loads = architecture in llama_cpp_facts.LOADED
    pinned = f"llama.cpp (llama-cpp-python {llama_cpp_facts.LLAMA_CPP_PYTHON})"
    if family is not None:
        reason = ""
    elif architecture is None:
        reason = f"{pinned} has no converter for it"
    elif not loads:
        reason = f"{pinned} converts it to {architecture!r} but its loader does not know that architecture"
    elif not gguf_knows:
        reason = f"the installed gguf package has no {architecture!r} architecture to name its tensors"
    else:
        reason = NOTES.get(
            model_type, f"{pinned} loads it as {architecture!r}, but this exporter has no converter for it yet"
        )
    return Verdict(model_type, architecture, gguf_knows, loads, family is not None, reason)
