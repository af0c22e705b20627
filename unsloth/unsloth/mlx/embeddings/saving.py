# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Saving an MLX embedding model as a sentence-transformers folder that ST loads on CPU torch.

`save_pretrained` writes the ST modules and, for a LoRA model, the adapters in PEFT's layout (`adapter_config.json`,
`adapter_model.safetensors`, Hub names) beside the base's name; without LoRA it writes the backbone's weights.
`save_pretrained_merged` writes the LoRA folded into the base, which ST loads without peft. The pushes upload
what those two write, through the same Hub upload as the text models'.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Tuple

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.lora import lora_settings

from ..models import hub
from .backbone import hub_names

POOLING_FOLDER = "1_Pooling"
PEFT_PREFIX = "base_model.model."
MERGED_METHODS = ("merged_16bit", "merged_32bit")


def _lora_modules(model: Any) -> Dict[str, Any]:
    from mlx_lm.tuner.lora import LoRALinear

    return {path: module for path, module in model.backbone.named_modules() if isinstance(module, LoRALinear)}


def merged_backbone_weights(model: Any) -> Dict[str, mx.array]:
    """The backbone's weights with every LoRA folded in (the model itself is left as it is)."""
    weights = dict(tree_flatten(model.backbone.parameters()))
    for path, module in _lora_modules(model).items():
        fused = module.fuse()
        for name in ("linear.weight", "linear.bias", "lora_a", "lora_b"):
            weights.pop(f"{path}.{name}", None)
        weights[f"{path}.weight"] = fused.weight
        if "bias" in fused:
            weights[f"{path}.bias"] = fused.bias
    return weights


def _base_weights(model: Any) -> Dict[str, mx.array]:
    """The backbone's weights without LoRA's own arrays (the base a PEFT adapter goes on)."""
    weights = {}
    for name, value in tree_flatten(model.backbone.parameters()):
        if name.endswith((".lora_a", ".lora_b")):
            continue
        weights[name.replace(".linear.weight", ".weight").replace(".linear.bias", ".bias")] = value
    return weights


def peft_adapter(model: Any) -> Tuple[Dict[str, Any], Dict[str, mx.array]]:
    """PEFT's adapter_config.json and adapter weights (lora_A: r x in, lora_B: out x r) under Hub names."""
    settings = lora_settings(model)
    if settings is None:
        raise ValueError("this model has no LoRA adapters to save in PEFT's layout")
    model_type = model.config.model_type
    weights: Dict[str, mx.array] = {}
    targets = []
    for path, module in _lora_modules(model).items():
        hub = next(iter(hub_names(model_type, {path: None})))
        targets.append(hub)
        weights[f"{PEFT_PREFIX}{hub}.lora_A.weight"] = module.lora_a.T
        weights[f"{PEFT_PREFIX}{hub}.lora_B.weight"] = module.lora_b.T
    config = {
        "peft_type": "LORA",
        "task_type": "FEATURE_EXTRACTION",
        "base_model_name_or_path": getattr(model, "model_name", None) or model.name_or_path,
        "r": settings.rank,
        "lora_alpha": settings.alpha,
        "lora_dropout": settings.dropout,
        "target_modules": sorted(targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    return config, weights


def _save_tensors(path: Path, weights: Dict[str, mx.array]) -> None:
    mx.save_safetensors(str(path), {name: value for name, value in weights.items()}, metadata={"format": "pt"})


def _write_modules(model: Any, folder: Path, with_config: bool = True) -> None:
    """modules.json, pooling, Dense and Normalize folders, and ST's two settings files."""
    source = Path(model.name_or_path)
    spec = model.spec
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    pooling_config = source / POOLING_FOLDER / "config.json"
    (folder / POOLING_FOLDER).mkdir(parents=True, exist_ok=True)
    if spec.declared and pooling_config.is_file():
        shutil.copyfile(pooling_config, folder / POOLING_FOLDER / "config.json")
    else:
        pooling = {"word_embedding_dimension": int(model.config.hidden_size), "pooling_mode_mean_tokens": True}
        (folder / POOLING_FOLDER / "config.json").write_text(json.dumps(pooling, indent=2))
    modules.append({"idx": 1, "name": "1", "path": POOLING_FOLDER, "type": "sentence_transformers.models.Pooling"})
    for layer_spec, layer in zip(spec.dense, model.dense):
        target = folder / layer_spec.path
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / layer_spec.path / "config.json", target / "config.json")
        _save_tensors(target / "model.safetensors", dict(tree_flatten(layer.parameters())))
        index = len(modules)
        modules.append(
            {"idx": index, "name": str(index), "path": layer_spec.path, "type": "sentence_transformers.models.Dense"}
        )
    if spec.normalize:
        index = len(modules)
        (folder / f"{index}_Normalize").mkdir(exist_ok=True)
        modules.append(
            {
                "idx": index,
                "name": str(index),
                "path": f"{index}_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    bert = {"max_seq_length": model.max_seq_length, "do_lower_case": spec.do_lower_case}
    (folder / "sentence_bert_config.json").write_text(json.dumps(bert, indent=2))
    settings = {
        "prompts": model.prompts,
        "default_prompt_name": model.default_prompt_name,
        "similarity_fn_name": model.similarity_fn_name,
    }
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings, indent=2))
    if with_config:
        shutil.copyfile(source / "config.json", folder / "config.json")


def save_pretrained(model: Any, save_directory: str, tokenizer: Any = None, **kwargs: Any) -> None:
    """An ST folder: the adapters in PEFT's layout for a LoRA model, else the whole backbone."""
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    adapters = lora_settings(model) is not None
    # An adapter folder holds no config.json: transformers takes one as a full model there and skips the base.
    _write_modules(model, folder, with_config=not adapters)
    model_type = model.config.model_type
    if adapters:
        config, weights = peft_adapter(model)
        (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
        _save_tensors(folder / "adapter_model.safetensors", weights)
    else:
        _save_tensors(folder / "model.safetensors", hub_names(model_type, _base_weights(model)))
    (tokenizer or model.tokenizer).save_pretrained(str(folder))


def save_pretrained_merged(
    model: Any, save_directory: str, tokenizer: Any = None, save_method: str = "merged_16bit", **kwargs: Any
) -> None:
    """An ST folder with the LoRA folded into the base weights, loadable by ST without peft."""
    if save_method not in MERGED_METHODS:
        raise NotImplementedError(
            f"save_pretrained_merged(save_method={save_method!r}) for an embedding model: use one of "
            f"{', '.join(MERGED_METHODS)}, or save_pretrained for the adapters"
        )
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    _write_modules(model, folder)
    # The weights keep the model's own dtype: a 16-bit load stays 16-bit, a float32 one is not rounded.
    weights = merged_backbone_weights(model)
    _save_tensors(folder / "model.safetensors", hub_names(model.config.model_type, weights))
    (tokenizer or model.tokenizer).save_pretrained(str(folder))


def attach_saving(model: Any) -> None:
    model.save_pretrained = MethodType(save_pretrained, model)
    model.save_pretrained_merged = MethodType(save_pretrained_merged, model)
    model.push_to_hub = MethodType(hub.model_push_to_hub, model)
    model.push_to_hub_merged = MethodType(hub.push_to_hub_merged, model)
    # The notebooks push `model.tokenizer` too; transformers' own push would bypass the one-message failures.
    model.tokenizer.push_to_hub = MethodType(hub.tokenizer_push_to_hub, model.tokenizer)
