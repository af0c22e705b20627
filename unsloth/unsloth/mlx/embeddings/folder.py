# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What a sentence-transformers folder declares after its backbone: pooling, Dense layers, normalization, prompts.

`parse_*` read the JSON texts (pure); `read_folder` reads them from disk. A module type the MLX path cannot run is
refused by name here, before any weight is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
DENSE = "sentence_transformers.models.Dense"
NORMALIZE = "sentence_transformers.models.Normalize"
# ST's pooling keys in the order it concatenates them, with the short names our pooling uses.
POOLING_MODES = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"),
    ("pooling_mode_lasttoken", "lasttoken"),
)
# The Dense activations sentence-transformers writes, by the name its config spells.
DENSE_ACTIVATIONS = ("torch.nn.modules.linear.Identity", "torch.nn.modules.activation.Tanh")


@dataclass(frozen=True)
class DenseSpec:
    path: str
    in_features: int
    out_features: int
    bias: bool
    activation: str


@dataclass(frozen=True)
class FolderSpec:
    """Everything after the backbone, as the folder declares it."""

    pooling: Tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    dense: Tuple[DenseSpec, ...] = ()
    normalize: bool = False
    max_seq_length: Optional[int] = None
    do_lower_case: bool = False
    prompts: Dict[str, str] = field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    similarity_fn_name: str = "cosine"
    # A folder without modules.json is a bare Hugging Face model: ST gives it mean pooling, so do we.
    declared: bool = False


def parse_pooling(text: str) -> Tuple[Tuple[str, ...], bool]:
    config = json.loads(text)
    modes = tuple(short for key, short in POOLING_MODES if config.get(key))
    if not modes:
        raise ValueError(f"1_Pooling/config.json names no pooling mode ({sorted(config)})")
    return modes, bool(config.get("include_prompt", True))


def parse_dense(path: str, text: str) -> DenseSpec:
    config = json.loads(text)
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in DENSE_ACTIVATIONS:
        raise NotImplementedError(
            f"{path}: Dense activation {activation!r} is not supported on MLX (supported: {', '.join(DENSE_ACTIVATIONS)})"
        )
    return DenseSpec(
        path, int(config["in_features"]), int(config["out_features"]), bool(config.get("bias", True)), activation
    )


def parse_modules(text: str) -> List[Tuple[str, str]]:
    """(type, path) for each module modules.json lists, refusing a type the MLX path has no module for."""
    modules = sorted(json.loads(text), key=lambda entry: entry.get("idx", 0))
    known = (TRANSFORMER, POOLING, DENSE, NORMALIZE)
    found = []
    for entry in modules:
        kind = entry["type"]
        # sentence-transformers 5 moved its modules to `sentence_transformers.sentence_transformer.modules`.
        short = kind.rsplit(".", 1)[-1]
        match = next((name for name in known if name.rsplit(".", 1)[-1] == short), None)
        if match is None:
            raise NotImplementedError(
                f"modules.json lists {kind}, which the MLX embedding path does not run "
                f"(it runs {', '.join(name.rsplit('.', 1)[-1] for name in known)})"
            )
        found.append((match, entry.get("path", "")))
    if not found or found[0][0] != TRANSFORMER:
        raise NotImplementedError("modules.json must start with a Transformer module on MLX")
    return found


def _read_json(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_folder(folder: Path) -> FolderSpec:
    """The folder's modules and settings; a bare Hugging Face folder gets mean pooling, as ST gives it."""
    bert_config = _read_json(folder / "sentence_bert_config.json")
    settings = _read_json(folder / "config_sentence_transformers.json")
    common: Dict[str, Any] = dict(
        max_seq_length=bert_config.get("max_seq_length"),
        do_lower_case=bool(bert_config.get("do_lower_case", False)),
        prompts=dict(settings.get("prompts") or {}),
        default_prompt_name=settings.get("default_prompt_name"),
        similarity_fn_name=settings.get("similarity_fn_name") or "cosine",
    )
    if not (folder / "modules.json").is_file():
        return FolderSpec(**common)
    pooling: Tuple[str, ...] = ("mean",)
    include_prompt, dense, normalize = True, [], False
    for kind, path in parse_modules((folder / "modules.json").read_text(encoding="utf-8")):
        if kind == POOLING:
            pooling, include_prompt = parse_pooling((folder / path / "config.json").read_text(encoding="utf-8"))
        elif kind == DENSE:
            dense.append(parse_dense(path, (folder / path / "config.json").read_text(encoding="utf-8")))
        elif kind == NORMALIZE:
            normalize = True
    return FolderSpec(pooling, include_prompt, tuple(dense), normalize, declared=True, **common)
