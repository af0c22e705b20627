"""Issue 49: a Whisper's `push_to_hub` and `push_to_hub_merged`, as the notebook's last cells call them, through
`huggingface_hub` against the Hub stand-in on 127.0.0.1 (CSM's pushes are the same two calls on the same code).

The pushes run in a fresh interpreter, since `huggingface_hub` reads `HF_ENDPOINT` when it is imported; what the
stand-in received is written back to disk, and the merged repository loads in transformers' Whisper on CPU torch
with the MLX model's logits, and the adapter repository in PEFT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ..conftest import NEUTRAL_CWD, REPO_ROOT

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
TOKEN = "hf_StandInSecret0123456789"
LABELS_TEXT = "Snow settles on the pines."

PUSHES = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tools.kits.hub_stand_in import HubStandIn
hub = HubStandIn().__enter__()
import os
os.environ["HF_ENDPOINT"] = hub.endpoint
import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from transformers import WhisperForConditionalGeneration
from unsloth import FastModel
model, processor = FastModel.from_pretrained(
    {model!r}, load_in_4bit=False, auto_model=WhisperForConditionalGeneration, whisper_language="English",
    whisper_task="transcribe",
)
model = FastModel.get_peft_model(model, r=8, target_modules=["q_proj", "v_proj"], lora_alpha=16, task_type=None)
# A fresh LoRA changes nothing (B is zero); a random B makes the adapters count in what is reloaded.
mx.random.seed(1)
model.load_weights(
    [(name, mx.random.normal(value.shape) * 0.5) for name, value in tree_flatten(model.trainable_parameters())
     if name.endswith("lora_b")],
    strict=False,
)
model.push_to_hub("me/lora", tokenizer=processor, token={token!r}, private=True)
model.push_to_hub_merged("me/merged", processor, save_method="merged_16bit", token={token!r})
out = Path({out!r})
for repo, files in hub.record.files.items():
    for name, data in files.items():
        target = out / repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
labels = processor.tokenizer({text!r}).input_ids
features = np.load({features!r})
logits = model(mx.array(features.transpose(0, 2, 1)), mx.array([labels]))
np.save(out / "logits.npy", np.array(logits))
print(json.dumps({{"created": hub.record.created, "labels": labels}}))
"""


def clip() -> np.ndarray:
    times = np.arange(16000) / 16000
    return (0.3 * np.sin(2 * np.pi * 360.0 * times)).astype(np.float32)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from transformers import WhisperProcessor

    from tools.kits.tiny_whisper import build_tiny_whisper

    root = tmp_path_factory.mktemp("whisper-push")
    folder = build_tiny_whisper(root / "model", tokenizer_cache_dir=root / "tokenizers")
    features = WhisperProcessor.from_pretrained(str(folder)).feature_extractor(clip(), sampling_rate=16000)
    np.save(root / "features.npy", features.input_features)
    environment = {key: value for key, value in os.environ.items() if key not in OFFLINE_SWITCHES}
    environment["UNSLOTH_MLX"] = "1"
    code = PUSHES.format(
        root=str(REPO_ROOT),
        model=str(folder),
        token=TOKEN,
        out=str(root / "hub"),
        text=LABELS_TEXT,
        features=str(root / "features.npy"),
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    answer.update(hub=root / "hub", base=folder, features=np.load(root / "features.npy"))
    return answer


def test_each_push_creates_its_repository_with_transformers_files(pushed: dict) -> None:
    assert {"name": "lora", "organization": "me", "visibility": "private", "type": "model"} in pushed["created"]
    assert any(entry["name"] == "merged" for entry in pushed["created"])
    lora, merged = pushed["hub"] / "me" / "lora", pushed["hub"] / "me" / "merged"
    processor_files = {"processor_config.json", "tokenizer.json"}
    assert {"adapter_config.json", "adapter_model.safetensors", *processor_files} <= {p.name for p in lora.iterdir()}
    expected = {"model.safetensors", "config.json", "generation_config.json", *processor_files}
    assert expected <= {p.name for p in merged.iterdir()}
    assert not (merged / "adapter_config.json").exists()


@pytest.mark.parametrize("repo", ["lora", "merged"])
def test_pushed_repositories_give_the_mlx_logits_in_transformers(pushed: dict, repo: str) -> None:
    import torch
    from peft import PeftModel
    from transformers import WhisperForConditionalGeneration

    folder = pushed["hub"] / "me" / repo
    if repo == "merged":
        reference = WhisperForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    else:
        base = WhisperForConditionalGeneration.from_pretrained(str(pushed["base"]))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            reference = PeftModel.from_pretrained(base, str(folder))
    features, labels = torch.tensor(pushed["features"]), torch.tensor([pushed["labels"]])
    with torch.no_grad():
        expected = reference.eval()(input_features=features, decoder_input_ids=labels).logits.numpy()
        unadapted = WhisperForConditionalGeneration.from_pretrained(str(pushed["base"])).eval()(
            input_features=features, decoder_input_ids=labels
        )
    actual = np.load(pushed["hub"] / "logits.npy")
    gap = float(np.abs(actual - expected).max())
    print(f"{repo} logits gap {gap:.2e}")
    assert gap <= 1e-3 and float(np.abs(expected - unadapted.logits.numpy()).max()) > 1e-2
