# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Load a model folder (config, safetensors, tokenizer files) through mlx_lm: a local folder, or a Hub id.

A Hub id goes through `huggingface_hub.snapshot_download`, so `HF_HUB_OFFLINE`, `HF_HOME` and `token` mean what
they mean to every Hugging Face library; offline, only a snapshot already in the cache loads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Tuple

from .checkpoint import SOURCE_PATH_ATTRIBUTE

REQUIRED_FILES = ("config.json",)
# What a model needs from its Hub repository: configs, weights and tokenizer files, never other formats' weights.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.jinja", "tokenizer*")
_HUB_ID = re.compile(r"^[\w.\-]+/[\w.\-]+$")


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


def load_model(
    path: str | Path,
    adapter_path: Optional[str | Path] = None,
    tokenizer_config: Optional[dict] = None,
    token: Optional[str] = None,
    revision: Optional[str] = None,
) -> Tuple[Any, Any]:
    """The model and tokenizer in the folder (or Hub id) `path`."""
    folder = resolve_model_folder(path, token=token, revision=revision)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}, and {str(path)!r} is not a Hub id (org/name)")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}")
    from mlx_lm import load

    model, tokenizer = load(
        str(folder), tokenizer_config=tokenizer_config, adapter_path=None if adapter_path is None else str(adapter_path)
    )
    # Kept so a full fine-tune's saves can carry the same config.json and load back through mlx_lm.
    setattr(model, SOURCE_PATH_ATTRIBUTE, str(folder.resolve()))
    return model, tokenizer
