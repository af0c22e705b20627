"""A Hugging Face cache holding the tiny llama under the Hub ids published notebooks load, plus small local
datasets in the columns those notebooks read (the datasets themselves cannot be downloaded here).

`build_notebook_cache(hf_home, {repo_id: chat_family_or_None})` writes one snapshot per id (the same tiny
weights each time, with the named chat family's template in its tokenizer files where the real repository ships
one); `write_datasets(folder)` writes JSONL files named after the datasets they stand in for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, Optional

REVISION = "0" * 40
FACTS = [
    ("What colour is the kettle?", "The kettle is red."),
    ("Where do bees carry pollen?", "Bees carry pollen to the hive."),
    ("How many times does the river bend?", "The river bends twice."),
    ("Where does the bread cool?", "The bread cools by the door."),
    ("What does the lighthouse blink?", "The lighthouse blinks green."),
    ("What settles on the pines?", "Snow settles on the pines."),
    ("How many herons wait?", "Two herons wait in the reeds."),
    ("How slow is the library clock?", "The clock is four minutes slow."),
]


def _with_chat_family(snapshot: Path, family: str) -> None:
    from unsloth.mlx.chat.families import FAMILIES

    config_path = snapshot / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = FAMILIES[family].template
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (snapshot / "chat_template.jinja").unlink(missing_ok=True)


def build_notebook_cache(hf_home: Path, repositories: Dict[str, Optional[str]]) -> Path:
    """Write each repository id's snapshot under `hf_home/hub`; returns `hf_home`."""
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    template = build_tiny_mlx_model(hf_home / "tiny-llama-source")
    for repo_id, family in repositories.items():
        organisation, name = repo_id.split("/")
        repository = hf_home / "hub" / f"models--{organisation}--{name}"
        snapshot = repository / "snapshots" / REVISION
        shutil.copytree(template, snapshot)
        if family is not None:
            _with_chat_family(snapshot, family)
        (repository / "refs").mkdir(parents=True, exist_ok=True)
        (repository / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return hf_home


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_datasets(folder: Path, copies: int = 16) -> Dict[str, Path]:
    """Stand-ins for FineTome-100k (ShareGPT turns), alpaca-cleaned and OpenMathReasoning-mini's `cot` split."""
    folder.mkdir(parents=True, exist_ok=True)
    facts = FACTS * copies
    sharegpt = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}], "source": "kit", "score": 5.0}
        for q, a in facts
    ]
    alpaca = [{"instruction": q, "input": "", "output": a} for q, a in facts]
    maths = [
        {
            "problem": f"What is {n} plus {n}?",
            "generated_solution": f"{n} plus {n} is {2 * n}.",
            "expected_answer": 2 * n,
        }
        for n in range(len(facts))
    ]
    return {
        "mlabonne/FineTome-100k": _jsonl(folder / "finetome.jsonl", sharegpt),
        "unsloth/alpaca-cleaned": _jsonl(folder / "alpaca.jsonl", alpaca),
        "unsloth/OpenMathReasoning-mini": _jsonl(folder / "openmath.jsonl", maths),
    }


def build_vision_notebook_cache(hf_home: Path, repositories: Dict[str, str]) -> Path:
    """Write the tiny vision model of each id's family (`tiny_vlm_model.BUILDERS`) as that id's snapshot."""
    from tools.kits.tiny_vlm_model import BUILDERS

    for repo_id, family in repositories.items():
        organisation, name = repo_id.split("/")
        repository = hf_home / "hub" / f"models--{organisation}--{name}"
        BUILDERS[family](repository / "snapshots" / REVISION)
        (repository / "refs").mkdir(parents=True, exist_ok=True)
        (repository / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return hf_home
