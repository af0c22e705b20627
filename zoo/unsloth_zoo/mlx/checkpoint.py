# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Checkpoints on disk: `output_dir/checkpoint-N/` with weights or adapters, optimizer state and trainer state.

A checkpoint is written into a hidden temporary folder and renamed into place, so a folder named
`checkpoint-N` is always complete; older ones are rotated out under `save_total_limit`, never the best one.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .callbacks import TrainerState
from .lora import lora_settings

PREFIX = "checkpoint"
ADAPTERS_FILE = "adapters.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "trainer_state.json"
ARGS_FILE = "training_args.json"
SOURCE_PATH_ATTRIBUTE = "unsloth_source_path"
# What the loaded model's config differs from its folder's config.json by (RoPE extended to a longer context).
CONFIG_OVERRIDES_ATTRIBUTE = "unsloth_config_overrides"
_CHECKPOINT_NAME = re.compile(rf"^{PREFIX}-(\d+)$")


def trains_adapters_only(model: Any) -> bool:
    """True when part of the model is frozen (LoRA): then only the trainable tensors are saved."""
    trainable = sum(array.size for _, array in tree_flatten(model.trainable_parameters()))
    total = sum(array.size for _, array in tree_flatten(model.parameters()))
    return trainable < total


def source_config(model: Any) -> Optional[dict]:
    """The config.json the model was loaded from, with what loading changed (RoPE scaling) on top; None if unknown."""
    source = getattr(model, SOURCE_PATH_ATTRIBUTE, None)
    if source is None or not (Path(source) / "config.json").is_file():
        return None
    config = json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
    return {**config, **getattr(model, CONFIG_OVERRIDES_ATTRIBUTE, {})}


def save_model_files(folder: Path, model: Any, tokenizer: Any = None) -> None:
    """Adapters (with mlx_lm's adapter config) or all weights (with the source config.json), plus the tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    if trains_adapters_only(model):
        mx.save_safetensors(str(folder / ADAPTERS_FILE), dict(tree_flatten(model.trainable_parameters())))
        settings = lora_settings(model)
        if settings is not None:
            (folder / ADAPTER_CONFIG_FILE).write_text(
                json.dumps(settings.adapter_config(), indent=2) + "\n", encoding="utf-8"
            )
    else:
        mx.save_safetensors(
            str(folder / WEIGHTS_FILE), dict(tree_flatten(model.parameters())), metadata={"format": "mlx"}
        )
        config = source_config(model)
        if config is not None:
            (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(str(folder))


def save_checkpoint(
    output_dir: Path,
    model: Any,
    optimizer: Any,
    state: TrainerState,
    args: Any,
    save_only_model: bool,
    extra_files: Optional[Dict[str, str]] = None,
) -> Path:
    """Write `checkpoint-<global_step>` completely (with `extra_files`, name to text), then make it visible."""
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / f"{PREFIX}-{state.global_step}"
    staging = output_dir / f".{final.name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    save_model_files(staging, model)
    if not save_only_model:
        mx.save_safetensors(str(staging / OPTIMIZER_FILE), dict(tree_flatten(optimizer.state)))
    state.save_to_json(str(staging / STATE_FILE))
    (staging / ARGS_FILE).write_text(args.to_json_string(), encoding="utf-8")
    for name, text in (extra_files or {}).items():
        (staging / name).write_text(text, encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def _merge_into(target: Any, loaded: Any) -> Any:
    """Copy loaded arrays into an existing nested state in place, so references held elsewhere stay valid."""
    if isinstance(loaded, dict):
        for key, value in loaded.items():
            target[key] = _merge_into(target[key], value) if key in target else value
        return target
    if isinstance(loaded, list):
        for index, value in enumerate(loaded):
            target[index] = _merge_into(target[index], value)
        return target
    return loaded


def load_checkpoint(folder: Path, model: Any, optimizer: Any) -> TrainerState:
    """Restore weights (or adapters) and optimizer state from a checkpoint; return its trainer state."""
    folder = Path(folder)
    if not (folder / STATE_FILE).is_file():
        raise FileNotFoundError(f"{folder} is not a checkpoint: no {STATE_FILE}")
    weights_file = folder / (ADAPTERS_FILE if trains_adapters_only(model) else WEIGHTS_FILE)
    model.load_weights(str(weights_file), strict=not trains_adapters_only(model))
    if (folder / OPTIMIZER_FILE).is_file():
        optimizer.init(model.trainable_parameters())
        loaded = tree_unflatten(list(mx.load(str(folder / OPTIMIZER_FILE)).items()))
        _merge_into(optimizer.state, loaded)
    mx.eval(model.parameters(), optimizer.state)
    return TrainerState.load_from_json(str(folder / STATE_FILE))


def load_best_weights(folder: Path, model: Any) -> None:
    weights_file = Path(folder) / (ADAPTERS_FILE if trains_adapters_only(model) else WEIGHTS_FILE)
    model.load_weights(str(weights_file), strict=not trains_adapters_only(model))
    mx.eval(model.parameters())


def sorted_checkpoints(output_dir: Path) -> List[Path]:
    """Checkpoint folders, oldest step first."""
    if not output_dir.is_dir():
        return []
    found = [
        (int(match.group(1)), path)
        for path in output_dir.iterdir()
        if (match := _CHECKPOINT_NAME.match(path.name)) and path.is_dir()
    ]
    return [path for _, path in sorted(found)]


def rotate_checkpoints(output_dir: Path, limit: Optional[int], best: Optional[str]) -> List[Path]:
    """Delete the oldest checkpoints beyond `limit`, always keeping the newest and the best; returns the deleted."""
    if limit is None or limit <= 0:
        return []
    checkpoints = sorted_checkpoints(output_dir)
    best_path = Path(best).resolve() if best else None
    keep = set(checkpoints[-limit:])
    if best_path is not None:
        for path in checkpoints:
            if path.resolve() == best_path:
                keep.add(path)
                # With the best kept apart, still keep `limit` in all unless that would drop the newest.
                if len(keep) > max(limit, 2):
                    keep.discard(min(keep - {path}, key=checkpoints.index))
    deleted = [path for path in checkpoints if path not in keep]
    for path in deleted:
        shutil.rmtree(path, ignore_errors=True)
    return deleted
