# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""LoRA on a vision-language model, chosen the way `FastVisionModel.get_peft_model` asks: vision, audio and/or
language layers, attention and/or MLP modules; and the adapter's save and reload.

A linear belongs to the vision side when it sits under the model's vision tower, to the audio side under its audio
tower, to the language side under its language model; it is an attention module when its parent is an attention
block, an MLP module otherwise. The adapter config lists every adapted module by its full path, so reloading puts
LoRA back exactly where it was.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from unsloth_zoo.mlx.checkpoint import ADAPTER_CONFIG_FILE, ADAPTERS_FILE

# The zoo's attribute, so the trainer's checkpoints and final save write this adapter config with the adapters.
from unsloth_zoo.mlx.lora import SETTINGS_ATTRIBUTE

# Where mlx-vlm's families keep their vision side: PaddleOCR-VL's tower is `visual`, Gemma 4's projector `embed_vision`.
VISION_ROOTS = ("vision_tower", "visual", "multi_modal_projector", "embed_vision")
# Gemma 4's audio side: its Conformer tower and the projector into the language model.
AUDIO_ROOTS = ("audio_tower", "embed_audio")
LANGUAGE_ROOTS = ("language_model",)
_ATTENTION_PARENTS = ("attn", "attention")
# The output head and embeddings are never adapted: LoRA goes on the blocks' linears only.
_NEVER = ("lm_head", "embed_tokens", "patch_embed", "embeddings")


@dataclass(frozen=True)
class VisionLoraSettings:
    rank: int
    alpha: float
    dropout: float
    paths: tuple
    base_model: Optional[str] = None
    quantization: Optional[dict] = None

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def adapter_config(self) -> Dict[str, Any]:
        config: Dict[str, Any] = {"fine_tune_type": "lora", "unsloth_vision": True}
        if self.base_model is not None:
            config["base_model_name_or_path"] = self.base_model
        if self.quantization is not None:
            config["quantization"] = dict(self.quantization)
        config["lora_parameters"] = {
            "rank": self.rank,
            "scale": self.scale,
            "dropout": self.dropout,
            "keys": list(self.paths),
        }
        return config


def _is_linear(module: Any) -> bool:
    return isinstance(module, (nn.Linear, nn.QuantizedLinear))


# `self.<attribute chain>.weight` (or `.bias`, `.scales`) in a module class's code: the chain's arrays read directly.
_ARRAY_READ = re.compile(r"\bself\.((?:\w+\.)*?\w+)\.(?:weight|bias|scales)\b")
_CHAINS_READ: Dict[type, frozenset] = {}


def _chains_read(owner: type) -> frozenset:
    """The attribute chains whose arrays a module class (or a base) reads itself, found once per class in its source
    (none where Python cannot read it)."""
    if owner not in _CHAINS_READ:
        found = set()
        for cls in owner.__mro__:
            try:
                found.update(_ARRAY_READ.findall(inspect.getsource(cls)))
            except (OSError, TypeError):
                continue
        _CHAINS_READ[owner] = frozenset(found)
    return _CHAINS_READ[owner]


def reads_weight_directly(owner: Any, chain: str) -> bool:
    """True when the owner's code reads the arrays of its layer at `chain` (`name` or `a.b.name`) itself, which a
    LoRA wrapper does not have."""
    return chain in _chains_read(type(owner))


def read_from_above(modules: Dict[str, Any], path: str) -> bool:
    """True when a module above the layer at `path` (its parent or any ancestor, through the attribute chain down to
    it) reads the layer's arrays itself."""
    parts = path.split(".")
    return any(
        reads_weight_directly(modules[owner], ".".join(parts[cut:]))
        for cut in range(len(parts) - 1, -1, -1)
        if (owner := ".".join(parts[:cut])) in modules
    )


def module_kind(path: str) -> Optional[tuple]:
    """(side, kind) of a linear's path: side 'vision', 'audio' or 'language', kind 'attention' or 'mlp'; None to
    skip."""
    parts = path.split(".")
    if any(part in _NEVER for part in parts):
        return None
    if parts[0] in VISION_ROOTS:
        side = "vision"
    elif parts[0] in AUDIO_ROOTS:
        side = "audio"
    elif parts[0] in LANGUAGE_ROOTS:
        side = "language"
    else:
        return None
    parents = parts[:-1]
    attention = any(any(word in part for word in _ATTENTION_PARENTS) for part in parents)
    return side, "attention" if attention else "mlp"


def target_name(path: str) -> str:
    """The name `target_modules` calls a linear by: its own, or its wrapper's for Gemma 4's clipped `.linear`."""
    parts = path.split(".")
    return parts[-2] if parts[-1] == "linear" and len(parts) > 1 else parts[-1]


def _shared(modules: Dict[str, Any]) -> set:
    """Paths of linears the model holds under two names (mlx-vlm's Gemma 4 audio attention shares its relative
    position projection): a LoRA swapped in under one name would leave the other calling the base."""
    holders: Dict[int, List[str]] = {}
    for path, module in modules.items():
        if _is_linear(module):
            holders.setdefault(id(module), []).append(path)
    return {path for paths in holders.values() if len(paths) > 1 for path in paths}


def audio_only_names(model: Any, target_modules: Optional[Sequence[str]]) -> List[str]:
    """The `target_modules` names found on the audio side alone (the audio notebooks list `post`, `linear_start`...)."""
    if target_modules is None:
        return []
    found: Dict[str, set] = {}
    for path, module in model.named_modules():
        kind = module_kind(path) if _is_linear(module) else None
        if kind is not None:
            found.setdefault(target_name(path), set()).add(kind[0])
    return sorted(name for name in set(target_modules) if found.get(name) == {"audio"})


def choose_paths(
    model: Any,
    vision: bool,
    language: bool,
    attention: bool,
    mlp: bool,
    target_modules: Optional[Sequence[str]] = None,
    audio: bool = False,
) -> List[str]:
    """Full paths of the linears to adapt; `target_modules` (last names) narrows the choice further."""
    wanted_sides = (("vision", vision), ("audio", audio), ("language", language))
    sides = {side for side, wanted in wanted_sides if wanted}
    kinds = {kind for kind, wanted in (("attention", attention), ("mlp", mlp)) if wanted}
    names = None if target_modules is None else set(target_modules)
    modules = dict(model.named_modules())
    shared = _shared(modules)
    chosen = []
    for path, module in modules.items():
        kind = module_kind(path) if _is_linear(module) else None
        if kind is None or kind[0] not in sides or kind[1] not in kinds or path in shared:
            continue
        if names is not None and target_name(path) not in names:
            continue
        # A layer the model reads `.weight` from (Gemma 4's patch embedder, read by its parent; Muse Glimmer's, whose
        # dtype the model itself reads) stays as it is, so the model still runs.
        if read_from_above(modules, path):
            continue
        chosen.append(path)
    return sorted(chosen)


def apply_vision_lora(model: Any, settings: VisionLoraSettings) -> VisionLoraSettings:
    """Freeze the model and swap each chosen linear for mlx_lm's LoRA layer around it."""
    from mlx_lm.tuner.lora import LoRALinear

    if not settings.paths:
        raise ValueError(
            "no linear layer matches: finetune_vision_layers / finetune_language_layers / finetune_attention_modules / "
            "finetune_mlp_modules (and target_modules) leave nothing to train"
        )
    modules = dict(model.named_modules())
    missing = [path for path in settings.paths if path not in modules]
    if missing:
        raise ValueError(f"the adapter names modules this model lacks: {', '.join(missing[:5])}")
    model.freeze()
    replacements = [
        (
            path,
            LoRALinear.from_base(modules[path], r=settings.rank, dropout=settings.dropout, scale=settings.scale),
        )
        for path in settings.paths
    ]
    model.update_modules(tree_unflatten(replacements))
    setattr(model, SETTINGS_ATTRIBUTE, settings)
    return settings


def vision_lora_settings(model: Any) -> Optional[VisionLoraSettings]:
    settings = getattr(model, SETTINGS_ATTRIBUTE, None)
    return settings if isinstance(settings, VisionLoraSettings) else None


def save_vision_adapter(model: Any, folder: Path) -> None:
    settings = vision_lora_settings(model)
    if settings is None:
        raise ValueError("this model has no LoRA adapter to save; call FastVisionModel.get_peft_model first")
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / ADAPTERS_FILE), dict(tree_flatten(model.trainable_parameters())))
    (folder / ADAPTER_CONFIG_FILE).write_text(json.dumps(settings.adapter_config(), indent=2) + "\n", encoding="utf-8")


def read_vision_adapter(folder: Path) -> Optional[Dict[str, Any]]:
    """The adapter config of a folder holding a saved vision adapter and no model of its own."""
    path = folder / ADAPTER_CONFIG_FILE
    if not path.is_file() or (folder / "config.json").is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    return config if config.get("unsloth_vision") else None


def load_vision_adapter(model: Any, folder: Path, config: Dict[str, Any]) -> Any:
    parameters = config["lora_parameters"]
    apply_vision_lora(
        model,
        VisionLoraSettings(
            rank=int(parameters["rank"]),
            alpha=float(parameters["scale"]) * int(parameters["rank"]),
            dropout=float(parameters.get("dropout", 0.0)),
            paths=tuple(parameters["keys"]),
            base_model=config.get("base_model_name_or_path"),
            quantization=config.get("quantization"),
        ),
    )
    model.load_weights(str(folder / ADAPTERS_FILE), strict=False)
    mx.eval(model.parameters())
    return model
