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


# Local stand-ins for the vision notebooks' image datasets: {dataset id: (text column, [(colour, text), ...])}.
_SQUARES = {
    "red": (200, 30, 30),
    "green": (30, 170, 60),
    "blue": (40, 60, 200),
    "yellow": (230, 210, 40),
}
VISION_DATASETS = {
    "unsloth/LaTeX_OCR": "text",
    "unsloth/Radiology_mini": "caption",
}


def prepare_vision(repositories: Dict[str, str], rows: int = 16) -> Dict[str, str]:
    """Switch MLX on, put the tiny vision model of each named family (`tools/kits/tiny_vlm_model.py`) under its Hub
    id, move into a scratch folder and write the image datasets as Parquet: {dataset id: local Parquet path}."""
    os.environ.setdefault("UNSLOTH_MLX", "1")
    scratch = Path(os.environ.get("NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="notebook-"))
    os.environ["HF_HOME"] = str(scratch / "hf-home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tools.kits.notebook_cache import build_vision_notebook_cache
    from tools.kits.tiny_vlm_model import IMAGE_SIDES

    build_vision_notebook_cache(scratch / "hf-home", repositories)
    side = min(IMAGE_SIDES[family] for family in repositories.values())
    files = write_image_datasets(scratch / "data", side, rows)
    files["AI4Math/MathVista:testmini"] = write_mathvista(scratch / "data", side)
    files["unsloth/llava-instruct-mix-vsft-mini"] = write_llava_mix(scratch / "data", side, rows)
    os.chdir(scratch)
    return files


def write_image_datasets(folder: Path, side: int, rows: int) -> Dict[str, str]:
    """Coloured squares of `side` pixels with a sentence naming the colour, in each dataset's columns, as Parquet."""
    from datasets import Dataset, Features, Image, Value
    from PIL import Image as PILImage

    folder.mkdir(parents=True, exist_ok=True)
    colours = list(_SQUARES) * (rows // len(_SQUARES) + 1)
    images = [PILImage.new("RGB", (side, side), _SQUARES[colour]) for colour in colours[:rows]]
    sentences = [f"A {colour} square." for colour in colours[:rows]]
    paths = {}
    for name, column in VISION_DATASETS.items():
        features = Features({"image": Image(), column: Value("string")})
        path = folder / (name.split("/")[1] + ".parquet")
        Dataset.from_dict({"image": images, column: sentences}, features=features).to_parquet(str(path))
        paths[name] = str(path)
    return paths


def write_mathvista(folder: Path, side: int, questions: int = 210) -> str:
    """MathVista's testmini columns (`decoded_image`, `image` as a path, `question`, `answer` as text): counting
    questions about squares, every fifth answer a word so the notebook's numeric filter has rows to drop."""
    from datasets import Dataset, Features, Image, Value
    from PIL import Image as PILImage

    rows: Dict[str, list] = {"decoded_image": [], "image": [], "question": [], "answer": []}
    for index in range(questions):
        count = 1 + index % 4
        rows["decoded_image"].append(PILImage.new("RGB", (side * count, side), _SQUARES["red"]))
        rows["image"].append(f"images/{index}.png")
        rows["question"].append("How many red squares are in the picture")
        rows["answer"].append("many" if index % 5 == 4 else str(count))
    features = Features(
        {"decoded_image": Image(), "image": Value("string"), "question": Value("string"), "answer": Value("string")}
    )
    path = folder / "mathvista_testmini.parquet"
    Dataset.from_dict(rows, features=features).to_parquet(str(path))
    return str(path)


def write_llava_mix(folder: Path, side: int, rows: int) -> str:
    """llava-instruct-mix-vsft's columns: `messages` whose parts carry `index`, `text` and `type`, and `images`."""
    from datasets import Dataset, Features, Image, List, Value

    from PIL import Image as PILImage

    part = {"index": Value("int64"), "text": Value("string"), "type": Value("string")}
    features = Features({"messages": List({"role": Value("string"), "content": List(part)}), "images": List(Image())})
    colours = list(_SQUARES) * (rows // len(_SQUARES) + 1)
    data: Dict[str, list] = {"messages": [], "images": []}
    for colour in colours[:rows]:
        question = [{"index": None, "text": "What colour is this?", "type": "text"}]
        question.append({"index": 0, "text": None, "type": "image"})
        answer = [{"index": None, "text": f"A {colour} square.", "type": "text"}]
        data["messages"].append([{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
        data["images"].append([PILImage.new("RGB", (side, side), _SQUARES[colour])])
    path = folder / "llava_instruct_mix_vsft_mini.parquet"
    Dataset.from_dict(data, features=features).to_parquet(str(path))
    return str(path)


def prepare_embeddings(repositories: Dict[str, str], rows: int = 64) -> Dict[str, str]:
    """Switch MLX on, put the tiny embedding model of each named family (`tools/kits/tiny_embedding_model.py`) under
    its Hub id, move into a scratch folder and write the embedding datasets as JSONL: {dataset id: local path}."""
    import json

    os.environ.setdefault("UNSLOTH_MLX", "1")
    scratch = Path(os.environ.get("NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="notebook-"))
    os.environ["HF_HOME"] = str(scratch / "hf-home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tools.kits.notebook_cache import FACTS, REVISION
    from tools.kits.tiny_embedding_model import build_tiny_embedding_model

    for repo_id, family in repositories.items():
        organisation, name = repo_id.split("/")
        repository = scratch / "hf-home" / "hub" / f"models--{organisation}--{name}"
        build_tiny_embedding_model(repository / "snapshots" / REVISION, family)
        (repository / "refs").mkdir(parents=True, exist_ok=True)
        (repository / "refs" / "main").write_text(REVISION, encoding="utf-8")
    folder = scratch / "data"
    folder.mkdir(parents=True, exist_ok=True)
    facts = [(f"{question} ({i})", f"{answer} ({i})") for i, (question, answer) in enumerate(FACTS * (rows // 8))]
    files = {
        "sentence-transformers/all-nli": [{"anchor": q, "positive": a} for q, a in facts],
        "tomaarsen/miriad-4.4M-split": [{"question": q, "passage_text": a} for q, a in facts],
        # dair-ai/emotion's columns: a text and one of six labels.
        "dair-ai/emotion": [{"text": f"{q} {a}", "label": i % 6} for i, (q, a) in enumerate(facts)],
        # electroglyph/technical: a term as the anchor, three sentences using it as its positives.
        "electroglyph/technical": [
            {"anchor": q, "positive": f"{a} ({i})"} for q, a in facts[: rows // 3] for i in range(3)
        ],
    }
    paths = {}
    for dataset_id, records in files.items():
        path = folder / f"{dataset_id.split('/')[1]}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in records), encoding="utf-8")
        paths[dataset_id] = str(path)
    os.chdir(scratch)
    return paths
