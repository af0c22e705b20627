# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Load a model folder from disk (config, safetensors, tokenizer files) through mlx_lm; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Tuple

from .checkpoint import SOURCE_PATH_ATTRIBUTE

REQUIRED_FILES = ("config.json",)


def load_model(
    path: str | Path, adapter_path: Optional[str | Path] = None, tokenizer_config: Optional[dict] = None
) -> Tuple[Any, Any]:
    """The model and tokenizer in `path`; a missing folder is an error here, never a hub download."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder} (the MLX backend only loads local folders)")
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
