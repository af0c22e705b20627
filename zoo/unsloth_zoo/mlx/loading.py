# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Load a model folder (config, safetensors, tokenizer files) through mlx_lm: a local folder, or a Hub id.

A context longer than the model's positions extends RoPE as CUDA Unsloth does: linear scaling by the ratio, in
the config's `rope_scaling`, except a Llama 3 scaling, which is kept and only gets the wider window.

A Hub id goes through `huggingface_hub.snapshot_download`, so `HF_HUB_OFFLINE`, `HF_HOME` and `token` mean what
they mean to every Hugging Face library; offline, only a snapshot already in the cache loads.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .checkpoint import CONFIG_OVERRIDES_ATTRIBUTE, SOURCE_PATH_ATTRIBUTE

REQUIRED_FILES = ("config.json",)
# What a model needs from its Hub repository: configs, weights and tokenizer files, never other formats' weights.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.jinja", "tokenizer*")
_HUB_ID = re.compile(r"^[\w.\-]+/[\w.\-]+$")
# The rope scalings that stay as they are under a longer context, or that a linear factor can be stacked onto.
_KEPT_ROPE, _STACKED_ROPE = ("llama3",), ("default", "linear")
logger = logging.getLogger(__name__)


def looks_like_hub_id(name: str) -> bool:
    """`org/name` with no other path parts (a local folder with that relative path is checked first)."""
    return bool(_HUB_ID.match(name)) and not name.startswith((".", "/"))


def resolve_model_folder(name: str | Path, token: Optional[str] = None, revision: Optional[str] = None) -> Path:
    """A local folder as it is; a Hub id as its snapshot folder in the Hugging Face cache (downloaded if allowed)."""
    folder = Path(name).expanduser()
    if folder.is_dir() or not looks_like_hub_id(str(name)):
        return folder
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(str(name), revision=revision, token=token, allow_patterns=list(HUB_PATTERNS)))
    except LocalEntryNotFoundError as error:
        raise FileNotFoundError(
            f"{name} is neither a local folder nor a snapshot in the Hugging Face cache, and downloading is off "
            f"(HF_HUB_OFFLINE is set, or the Hub cannot be reached); set HF_HOME to the cache holding it: {error}"
        ) from error


def _rope_settings(config: Dict[str, Any]) -> Dict[str, Any]:
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    return dict(scaling) if isinstance(scaling, dict) else {}


def rope_from_parameters(config: Dict[str, Any]) -> Dict[str, Any]:
    """The top-level `rope_theta` and `rope_scaling` a folder saved by transformers 5 keeps only inside
    `rope_parameters`: mlx_lm's classes of this release read the top-level keys, and would otherwise run the default
    base (10000) and no scaling. Per-layer-type parameters (no `rope_type` of their own) are left to the class."""
    parameters = config.get("rope_parameters")
    if not isinstance(parameters, dict) or "rope_type" not in parameters:
        return {}
    overrides: Dict[str, Any] = {}
    if "rope_theta" not in config and "rope_theta" in parameters:
        overrides["rope_theta"] = parameters["rope_theta"]
    if "rope_scaling" not in config and parameters["rope_type"] != "default":
        overrides["rope_scaling"] = {key: value for key, value in parameters.items() if key != "rope_theta"}
    return overrides


def extended_context(config: Dict[str, Any], max_seq_length: Optional[int]) -> Dict[str, Any]:
    """The config keys that let a model with `config` run `max_seq_length` tokens; empty when it already can."""
    positions = config.get("max_position_embeddings")
    if max_seq_length is None or not positions or int(max_seq_length) <= int(positions):
        return {}
    factor = int(max_seq_length) / int(positions)
    existing = _rope_settings(config)
    kind = existing.get("rope_type") or existing.get("type") or "default"
    if kind in _KEPT_ROPE:
        return {"max_position_embeddings": int(max_seq_length)}
    if kind not in _STACKED_ROPE:
        raise NotImplementedError(
            f"max_seq_length={max_seq_length} is past the model's {positions} positions, and its {kind!r} RoPE "
            f"scaling cannot be extended linearly here; use max_seq_length <= {positions}"
        )
    if kind == "linear":
        factor *= float(existing.get("factor", 1.0))
    scaling = {"rope_type": "linear", "type": "linear", "factor": factor}
    overrides: Dict[str, Any] = {"max_position_embeddings": int(max_seq_length), "rope_scaling": scaling}
    if isinstance(config.get("rope_parameters"), dict):
        # transformers 5 reads rope settings from rope_parameters, which keeps the base frequency beside them.
        overrides["rope_parameters"] = {**config["rope_parameters"], **scaling}
    return overrides


def _apply_linear_rope(model: Any, factor: float) -> None:
    """Make sure every rotary embedding runs `factor` times slower: families whose mlx_lm class ignores
    `rope_scaling` get it set on their `nn.RoPE` layers, and a model with none is refused."""
    import mlx.nn as nn

    ropes = [module for _, module in model.named_modules() if isinstance(module, nn.RoPE)]
    if any(abs(rope.scale * factor - 1.0) < 1e-6 for rope in ropes):
        return
    if not ropes or any(rope.scale != 1.0 for rope in ropes):
        raise NotImplementedError(
            f"{type(model).__module__} has no plain rotary embedding to scale by {factor:g}; "
            "use a max_seq_length within the model's positions"
        )
    for rope in ropes:
        rope.scale = 1.0 / factor


def warn_kv_shared_layers(model: Any) -> None:
    """Gemma 3n's last layers reuse an earlier layer's keys and values when generating from a cache, but the uncached
    pass (the one training takes, in mlx_lm's Gemma 3n and mlx-vlm's alike) has them compute their own: say so, since
    training then fits a pass generation never runs."""
    shared = [name for name, module in model.named_modules() if getattr(module, "is_kv_shared_layer", False)]
    if shared:
        logger.warning(
            "Unsloth: %d layers of this model reuse earlier layers' keys and values when generating, but the "
            "training pass computes their own (first: %s); LoRA trained here fits a pass generation does not run",
            len(shared),
            shared[0],
        )


def load_model(
    path: str | Path,
    adapter_path: Optional[str | Path] = None,
    tokenizer_config: Optional[dict] = None,
    token: Optional[str] = None,
    revision: Optional[str] = None,
    max_seq_length: Optional[int] = None,
) -> Tuple[Any, Any]:
    """The model and tokenizer in the folder (or Hub id) `path`, its RoPE extended to `max_seq_length` when that
    is past its positions."""
    folder = resolve_model_folder(path, token=token, revision=revision)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}, and {str(path)!r} is not a Hub id (org/name)")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}")
    from mlx_lm import load

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    extension = extended_context(config, max_seq_length)
    overrides = {**rope_from_parameters(config), **extension}
    adapter = None if adapter_path is None else str(adapter_path)
    try:
        model, tokenizer = load(
            str(folder), tokenizer_config=tokenizer_config, model_config=overrides, adapter_path=adapter
        )
    except ValueError as error:
        if "rope_scaling" not in extension or "rope_scaling" not in str(error):
            raise
        # A class that accepts only its own scaling kinds (Phi-3: LongRoPE) is built unscaled, then scaled below.
        window = {key: value for key, value in overrides.items() if key != "rope_scaling"}
        model, tokenizer = load(
            str(folder), tokenizer_config=tokenizer_config, model_config=window, adapter_path=adapter
        )
    if "rope_scaling" in extension:
        _apply_linear_rope(model, extension["rope_scaling"]["factor"])
    if extension:
        logger.warning(
            "Unsloth: the model has %s positions; RoPE %s extends it to max_seq_length=%d",
            config["max_position_embeddings"],
            f"scaling (linear, factor {extension['rope_scaling']['factor']:g})"
            if "rope_scaling" in extension
            else "(its own Llama 3 scaling)",
            max_seq_length,
        )
    warn_kv_shared_layers(model)
    setattr(model, CONFIG_OVERRIDES_ATTRIBUTE, overrides)
    # Kept so a full fine-tune's saves can carry the same config.json and load back through mlx_lm.
    setattr(model, SOURCE_PATH_ATTRIBUTE, str(folder.resolve()))
    return model, tokenizer
