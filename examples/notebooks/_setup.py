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


def write_preference_datasets(folder: Path) -> Dict[str, str]:
    """Stand-ins for the DPO and ORPO notebooks' preference datasets, in their columns: {dataset id: local JSONL}."""
    import json

    from tools.kits.notebook_cache import FACTS

    folder.mkdir(parents=True, exist_ok=True)
    turns = [
        (
            [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
            [{"role": "user", "content": question}, {"role": "assistant", "content": "I could not say."}],
        )
        for question, answer in FACTS * 2
    ]
    feedback = [
        {"prompt": chosen[0]["content"], "chosen": chosen, "rejected": rejected, "messages": chosen}
        for chosen, rejected in turns
    ]
    dolphin = [{"instruction": q, "input": "", "accepted": a, "rejected": "I could not say."} for q, a in FACTS * 2]
    files = {
        "HuggingFaceH4/ultrafeedback_binarized:train_prefs": ("ultrafeedback_train.jsonl", feedback),
        "HuggingFaceH4/ultrafeedback_binarized:test_prefs": ("ultrafeedback_test.jsonl", feedback[:4]),
        "reciperesearch/dolphin-sft-v0.1-preference": ("dolphin_preference.jsonl", dolphin),
    }
    paths = {}
    for name, (file_name, rows) in files.items():
        path = folder / file_name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        paths[name] = str(path)
    return paths
