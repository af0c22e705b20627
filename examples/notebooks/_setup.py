"""The first cell of each script here: a scratch folder, the tiny model under the notebook's Hub ids (offline),
and the dataset files that stand in for the notebook's downloads. Needs the repository checkout."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parents[2]


def prepare(repositories: Dict[str, Optional[str]]) -> Dict[str, str]:
    """Switch MLX on, build the Hub cache, move into a scratch folder; returns {dataset id: local JSONL path}."""
    os.environ.setdefault("UNSLOTH_MLX", "1")
    scratch = Path(os.environ.get("NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="notebook-"))
    os.environ["HF_HOME"] = str(scratch / "hf-home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tools.kits.notebook_cache import build_notebook_cache, write_datasets

    build_notebook_cache(scratch / "hf-home", repositories)
    files = write_datasets(scratch / "data")
    os.chdir(scratch)
    return {name: str(path) for name, path in files.items()}
