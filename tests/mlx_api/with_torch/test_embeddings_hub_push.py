"""Issue 48: an embedding model's `push_to_hub`, `model.tokenizer.push_to_hub`, `push_to_hub_merged` and
`push_to_hub_gguf`, as the embedding notebooks' last cells call them, through `huggingface_hub` against the Hub
stand-in on 127.0.0.1.

The pushes run in a fresh interpreter, since `huggingface_hub` reads `HF_ENDPOINT` when it is imported; what the
stand-in received is written back to disk and loaded by sentence-transformers itself on CPU torch, which must give
the MLX model's embeddings back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tools.kits.tiny_embedding_model import build_tiny_embedding_model

from ..conftest import NEUTRAL_CWD, REPO_ROOT

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
TOKEN = "hf_StandInSecret0123456789"
TEXTS = ["The sun rises in the east.", "Rice needs water, heat and time.", "hi"]

PUSHES = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tools.kits.hub_stand_in import HubStandIn
hub = HubStandIn().__enter__()
import os
os.environ["HF_ENDPOINT"] = hub.endpoint
import mlx.core as mx
from unsloth import FastSentenceTransformer
from unsloth.mlx.embeddings.saving import _lora_modules
model = FastSentenceTransformer.from_pretrained({model!r}, max_seq_length=64)
model = FastSentenceTransformer.get_peft_model(
    model, r=8, target_modules=["value", "key", "dense", "query"], lora_alpha=16, task_type="FEATURE_EXTRACTION"
)
# A fresh LoRA changes nothing (B is zero); a random B makes the adapters count in what is reloaded.
mx.random.seed(1)
for module in _lora_modules(model).values():
    module.lora_b = mx.random.normal(module.lora_b.shape) * 0.2
model.push_to_hub("me/lora", token={token!r}, private=True)
model.tokenizer.push_to_hub("me/lora", token={token!r})
model.push_to_hub_merged("me/merged", tokenizer=model.tokenizer, save_method="merged_16bit", token={token!r})
model.push_to_hub_gguf("me/gguf", tokenizer=model.tokenizer, quantization_method="f16", token={token!r})
out = Path({out!r})
for repo, files in hub.record.files.items():
    for name, data in files.items():
        target = out / repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
print(json.dumps({{
    "created": hub.record.created,
    "embeddings": model.encode({texts!r}).tolist(),
}}))
"""


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("embedding-push")
    folder = build_tiny_embedding_model(root / "bert", "bert")
    environment = {key: value for key, value in os.environ.items() if key not in OFFLINE_SWITCHES}
    environment["UNSLOTH_MLX"] = "1"
    code = PUSHES.format(root=str(REPO_ROOT), model=str(folder), token=TOKEN, out=str(root / "hub"), texts=TEXTS)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    answer["hub"] = root / "hub"
    return answer


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_each_push_creates_its_repository(pushed: dict) -> None:
    assert {"name": "lora", "organization": "me", "visibility": "private", "type": "model"} in pushed["created"]
    assert any(entry["name"] == "merged" for entry in pushed["created"])
    lora, merged = pushed["hub"] / "me" / "lora", pushed["hub"] / "me" / "merged"
    assert {"adapter_config.json", "adapter_model.safetensors", "modules.json", "tokenizer.json"} <= {
        p.name for p in lora.iterdir()
    }
    assert {"model.safetensors", "config.json", "modules.json", "tokenizer.json"} <= {p.name for p in merged.iterdir()}
    assert not (merged / "adapter_config.json").exists()
    assert (pushed["hub"] / "me" / "gguf" / "unsloth.F16.gguf").is_file()


@pytest.mark.parametrize("repo", ["lora", "merged"])
def test_pushed_files_reload_in_sentence_transformers(pushed: dict, repo: str) -> None:
    from sentence_transformers import SentenceTransformer

    reloaded = SentenceTransformer(str(pushed["hub"] / "me" / repo), device="cpu").encode(TEXTS)
    ours = np.array(pushed["embeddings"])
    assert cosines(reloaded, ours).min() >= 0.999
