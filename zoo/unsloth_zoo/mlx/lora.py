# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""LoRA on an mlx_lm model: freeze the base, swap the chosen linears (plain, quantized, or MoE experts) for mlx_lm's
LoRA layers, and train `embed_tokens` / `lm_head` in full when they are named, as CUDA Unsloth's modules_to_save.

A target name matches a module path in any block that equals it or ends with `.name` (PEFT's suffix rule), so
hybrid models get LoRA on every block that has the name, not only on blocks shaped like the first one. The names
transformers 5 and CUDA Unsloth give a MoE layer's experts (`gate_up_proj`, `experts`, Mixtral's `w1`..`w3`) reach
mlx_lm's expert stacks (SwitchGLU / SwitchMLP) in every family. A name that another family uses but this model lacks
is skipped with a warning, as PEFT skips it; a typo, or a list matching nothing, is refused and leaves the model
unchanged.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Trained whole, never through LoRA (CUDA Unsloth turns them into PEFT's modules_to_save).
FULL_TARGETS = ("embed_tokens", "lm_head")
# Hugging Face module names that mlx_lm stores under other names (its sanitize splits Granite 4.0-H's dense
# shared_mlp into mlp.gate_proj / up_proj / down_proj), so a CUDA notebook's names still find their weights.
MLX_NAMES = {
    "shared_mlp.input_linear": ("mlp.gate_proj", "mlp.up_proj"),
    "shared_mlp.output_linear": ("mlp.down_proj",),
}
# The expert parts (gate, up, down) each Hugging Face expert name means. Upstream's MoE names reach the experts beside
# any literal match (`down_proj` names both a dense MLP and the experts); older per-family names, matching nothing
# as spelled, reach the dense MLP mlx_lm renamed them to (LFM2-MoE's `w1` is its `gate_proj`), else the experts.
MOE_EXPERT_NAMES = {
    "gate_up_proj": ("gate", "up"),
    "gate_proj": ("gate",),
    "up_proj": ("up",),
    "down_proj": ("down",),
    "experts": ("gate", "up", "down"),
}
LEGACY_EXPERT_NAMES = {
    "w1": ("gate",),
    "w3": ("up",),
    "v1": ("up",),
    "w2": ("down",),
    "input_linear": ("gate", "up"),
    "output_linear": ("down",),
}
DENSE_PARTS = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
# mlx_lm's expert linears by the part each plays: SwitchGLU's three, SwitchMLP's fc1 (up) and fc2 (down).
SWITCH_PARTS = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "fc1": "up", "fc2": "down"}
# A plain attribute, not an mlx container, so the settings never show up among the model's parameters.
SETTINGS_ATTRIBUTE = "unsloth_lora_settings"
# Set on a model whose loader was told a full fine-tune is meant, so training it without LoRA raises no warning.
FULL_FINETUNING_ATTRIBUTE = "unsloth_full_finetuning"
# How mlx_lm's family modules declare a linear, so the projection names of every family are read, not listed here.
_LINEAR_DECLARATION = re.compile(r"self\.(\w+)\s*=\s*(?:nn\.)?(?:Linear|QuantizedLinear|SwitchLinear)\(")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoraSettings:
    rank: int
    alpha: float
    dropout: float
    num_layers: int
    keys: tuple
    # Where the base came from and how it was quantized, so a saved adapter can be put back on the same base.
    base_model: Optional[str] = None
    quantization: Optional[dict] = None
    modules_to_save: tuple = ()

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def adapter_config(self) -> dict:
        """The `adapter_config.json` that mlx_lm's `load(..., adapter_path=...)` reads back."""
        base: Dict[str, Any] = {} if self.base_model is None else {"base_model_name_or_path": self.base_model}
        if self.quantization is not None:
            base["quantization"] = dict(self.quantization)
        if self.modules_to_save:
            base["modules_to_save"] = list(self.modules_to_save)
        return {
            **base,
            "fine_tune_type": "lora",
            "num_layers": self.num_layers,
            "lora_parameters": {
                "rank": self.rank,
                "scale": self.scale,
                "dropout": self.dropout,
                "keys": list(self.keys),
            },
        }


def _adaptable_types() -> tuple:
    import mlx.nn as nn
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    return (nn.Linear, nn.QuantizedLinear, SwitchLinear, QuantizedSwitchLinear)


def _matches(path: str, target: str) -> bool:
    return path == target or path.endswith("." + target)


def expert_parts(blocks: Sequence[Any]) -> Dict[str, str]:
    """Each expert linear's block-relative path (a child of a SwitchGLU / SwitchMLP) and the part it plays."""
    from mlx_lm.models.switch_layers import SwitchGLU, SwitchMLP

    found: Dict[str, str] = {}
    for block in blocks:
        for path, module in block.named_modules():
            if isinstance(module, (SwitchGLU, SwitchMLP)):
                for name, part in SWITCH_PARTS.items():
                    if name in module:
                        found[f"{path}.{name}"] = part
    return found


def _expert_name(target: str) -> Tuple[str, bool]:
    """The expert name a target spells (`experts.gate_up_proj` as `gate_up_proj`) and whether it says `experts`."""
    parts = target.split(".")
    if len(parts) >= 2 and parts[-2] == "experts":
        return parts[-1], True
    return target, False


def _target_paths(target: str, paths: Sequence[str], experts: Dict[str, str]) -> List[str]:
    """The adaptable paths one target name reaches: its literal matches, mlx_lm's renames, and the MoE experts."""
    literal = [path for path in paths if _matches(path, target)]
    if not literal and target in MLX_NAMES:
        literal = [path for path in paths if any(_matches(path, name) for name in MLX_NAMES[target])]
    name, under_experts = _expert_name(target)
    wanted = MOE_EXPERT_NAMES.get(name, ())
    if not wanted and (not literal or under_experts):
        wanted = LEGACY_EXPERT_NAMES.get(name, ())
        dense = [DENSE_PARTS[part] for part in wanted]
        renamed = [path for path in paths if path not in experts and any(_matches(path, leaf) for leaf in dense)]
        if renamed and not under_experts:
            return renamed
    reached = [path for path, part in experts.items() if part in wanted]
    return list(dict.fromkeys((reached if under_experts else literal + reached)))


def adaptable_paths(blocks: Sequence[Any]) -> Tuple[str, ...]:
    """Every linear (or MoE expert linear) path inside any of `blocks`, relative to its block."""
    kinds = _adaptable_types()
    found = {path for block in blocks for path, module in block.named_modules() if isinstance(module, kinds)}
    return tuple(sorted(found))


@functools.lru_cache(maxsize=1)
def projection_vocabulary() -> frozenset:
    """Every linear name some mlx_lm family declares, plus the Hugging Face names our tables map onto them."""
    import mlx_lm.models

    names = {
        match.group(1)
        for source in Path(mlx_lm.models.__file__).parent.glob("*.py")
        for match in _LINEAR_DECLARATION.finditer(source.read_text(encoding="utf-8"))
    }
    return frozenset(names | set(MOE_EXPERT_NAMES) | set(LEGACY_EXPERT_NAMES) | set(MLX_NAMES) | set(FULL_TARGETS))


def _other_familys_name(target: str) -> bool:
    """A projection name of some family (`experts.<name>` too), as opposed to a typo or a wrong dotted path."""
    name, _ = _expert_name(target)
    return ("." not in name and name in projection_vocabulary()) or target in MLX_NAMES


def _adaptable_names(paths: Sequence[str], full: Dict[str, str]) -> str:
    return ", ".join(sorted({path.rsplit(".", 1)[-1] for path in paths} | set(full)))


def _warn_skipped(skipped: List[str], paths: Sequence[str], full: Dict[str, str]) -> None:
    logger.warning(
        "target_modules: %s %s no layer of this model (other families' projection names), so %s skipped as PEFT "
        "skips them; this model's adaptable names are %s",
        ", ".join(repr(name) for name in skipped),
        "names" if len(skipped) == 1 else "name",
        "it is" if len(skipped) == 1 else "they are",
        _adaptable_names(paths, full),
    )


def _full_modules(model: Any) -> Dict[str, str]:
    """`embed_tokens` / `lm_head` by their model paths; a tied model's output is its `embed_tokens`."""
    import mlx.nn as nn

    found: Dict[str, str] = {}
    for path, module in model.named_modules():
        name = path.rsplit(".", 1)[-1]
        if name == "embed_tokens" and isinstance(module, (nn.Embedding, nn.QuantizedEmbedding)):
            found.setdefault(name, path)
        elif name == "lm_head" and isinstance(module, (nn.Linear, nn.QuantizedLinear)):
            found.setdefault(name, path)
    if "lm_head" not in found and "embed_tokens" in found:
        found["lm_head"] = found["embed_tokens"]
    return found


def _refuse_unmatched(unmatched: List[str], paths: Sequence[str], full: Dict[str, str]) -> None:
    raise ValueError(
        f"target_modules: {', '.join(repr(name) for name in unmatched)} "
        f"{'matches' if len(unmatched) == 1 else 'match'} nothing in this model; "
        f"its adaptable names are {_adaptable_names(paths, full)} (a dotted path such as {paths[0]!r} also works); "
        "the model is unchanged"
        if paths
        else f"target_modules: {unmatched} match nothing, and this model has no linear layer to adapt; "
        "the model is unchanged"
    )


def _unquantized(module: Any) -> Any:
    """A trainable float copy of a quantized embedding or linear (bitsandbytes likewise leaves them unquantized)."""
    import mlx.core as mx
    import mlx.nn as nn

    if not isinstance(module, (nn.QuantizedEmbedding, nn.QuantizedLinear)):
        return module
    weight = mx.dequantize(
        module.weight,
        module.scales,
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=getattr(module, "mode", "affine"),
    )
    if isinstance(module, nn.QuantizedEmbedding):
        plain = nn.Embedding(*weight.shape)
    else:
        plain = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
        if "bias" in module:
            plain.bias = module.bias
    plain.weight = weight
    return plain


def _train_in_full(model: Any, paths: Sequence[str]) -> None:
    from mlx.utils import tree_unflatten

    modules = dict(model.named_modules())
    model.update_modules(tree_unflatten([(path, _unquantized(modules[path])) for path in paths]))
    modules = dict(model.named_modules())
    for path in paths:
        modules[path].unfreeze()


def apply_lora(
    model: Any,
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
    target_modules: Sequence[str] = DEFAULT_TARGETS,
    num_layers: Optional[int] = None,
    base_model: Optional[str] = None,
    quantization: Optional[dict] = None,
    strict: bool = True,
) -> LoraSettings:
    """Freeze `model`, put LoRA on `target_modules` in its last `num_layers` blocks (all when None), and train
    `embed_tokens` / `lm_head` in full when named. With `strict`, a name matching nothing is refused; without it
    (the default list) only a list matching nothing at all is. A name some other family uses for a projection
    (GLM's latent attention has no `q_proj`) is skipped with one warning, as PEFT skips it; a name no family uses
    is refused as a typo."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    blocks = model.layers
    layers = len(blocks) if num_layers is None else int(num_layers)
    paths = adaptable_paths(blocks[len(blocks) - layers :] if layers > 0 else [])
    full = _full_modules(model)
    experts = expert_parts(blocks[len(blocks) - layers :] if layers > 0 else [])
    wanted = list(dict.fromkeys(target_modules))
    reached = {target: _target_paths(target, paths, experts) for target in wanted}
    keys = tuple(path for path in paths if any(path in found for found in reached.values()))
    saved = tuple(name for name in FULL_TARGETS if name in wanted and name in full)
    unmatched = [target for target in wanted if target not in saved and not reached[target]]
    # Every refusal comes before the model is frozen or changed, so the caller's model stays as it was.
    if not (keys or saved):
        _refuse_unmatched(unmatched or wanted, paths, full)
    typos = [target for target in unmatched if not _other_familys_name(target)]
    if strict and typos:
        _refuse_unmatched(typos, paths, full)
    if strict and unmatched:
        _warn_skipped(unmatched, paths, full)
    settings = LoraSettings(
        rank=int(rank),
        alpha=float(alpha),
        dropout=float(dropout),
        num_layers=layers,
        keys=keys,
        base_model=base_model,
        quantization=quantization,
        modules_to_save=saved,
    )
    model.freeze()
    if keys:
        config = {"rank": settings.rank, "scale": settings.scale, "dropout": settings.dropout, "keys": list(keys)}
        linear_to_lora_layers(model, layers, config)
    _train_in_full(model, sorted({full[name] for name in saved}))
    setattr(model, SETTINGS_ATTRIBUTE, settings)
    return settings


def lora_settings(model: Any) -> Optional[LoraSettings]:
    return getattr(model, SETTINGS_ATTRIBUTE, None)


def warn_if_training_without_lora(model: Any, trainer: str = "SFTTrainer") -> None:
    """One warning when a model without LoRA adapters is about to be trained whole and nobody asked for that (a
    refused get_peft_model left the base as it was)."""
    from mlx.utils import tree_flatten

    if lora_settings(model) is not None or getattr(model, FULL_FINETUNING_ATTRIBUTE, False):
        return
    flat = tree_flatten(model.trainable_parameters())
    if any(name.endswith(".lora_a") for name, _ in flat):
        return  # adapters another family's get_peft_model put on (Whisper's keeps its settings elsewhere)
    trainable = sum(array.size for _, array in flat)
    logger.warning(
        "%s: this model has no LoRA adapters, so all %s of its trainable parameters will be trained (a full "
        "fine-tune); call get_peft_model(model, ...) first for LoRA, or load it with full_finetuning=True to say a "
        "full fine-tune is meant",
        trainer,
        f"{trainable:,}",
    )


def _own_size(module: Any) -> int:
    """Elements of the arrays a module holds itself (not its children's); a quantized weight at its float size."""
    import mlx.core as mx

    own = {name: value for name, value in module.items() if isinstance(value, mx.array)}
    if hasattr(module, "bits") and "weight" in own:
        return own["weight"].size * 32 // module.bits + sum(
            value.size for name, value in own.items() if name not in ("weight", "scales", "biases")
        )
    return sum(value.size for value in own.values())


def trainable_parameter_counts(model: Any) -> Tuple[int, int]:
    """(trainable, all) parameter counts as PEFT reports them: LoRA weights included in all, a quantized weight
    counted at its unquantized size."""
    from mlx.utils import tree_flatten

    trainable = sum(array.size for _, array in tree_flatten(model.trainable_parameters()))
    return trainable, sum(_own_size(module) for _, module in model.named_modules())
