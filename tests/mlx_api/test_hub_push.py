"""Hub uploads (`model.push_to_hub`, `tokenizer.push_to_hub`, `push_to_hub_merged`, `push_to_hub_gguf`) through
`huggingface_hub` against a stand-in Hub on 127.0.0.1 (`HF_ENDPOINT`), and their one-message failures.

The uploads run in a fresh interpreter, since `huggingface_hub` reads `HF_ENDPOINT` and `HF_HUB_OFFLINE` when it
is imported, exactly as a user's notebook would set them."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NEUTRAL_CWD, REPO_ROOT

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
TOKEN = "hf_StandInSecret0123456789"
# A token only the environment holds, as a user who ran `export HF_TOKEN=...` has.
ENVIRONMENT_TOKEN = "hf_EnvironmentSecret9876543210"

UPLOADS = r"""
import json, logging, sys
sys.path.insert(0, {root!r})
from tools.kits.hub_stand_in import HubStandIn
logging.basicConfig(level=logging.DEBUG)
hub = HubStandIn().__enter__()
import os
os.environ["HF_ENDPOINT"] = hub.endpoint
from unsloth import FastLanguageModel
from unsloth.mlx.models.hub import HubUploadError
model, tokenizer = FastLanguageModel.from_pretrained({model!r})
model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
model.push_to_hub("me/lora", token={token!r}, private=True)
tokenizer.push_to_hub("me/lora", token={token!r})
model.push_to_hub_merged("me/merged", tokenizer, save_method="merged_16bit", token={token!r})
model.push_to_hub_gguf("me/gguf", tokenizer, quantization_method="f16", token={token!r})
hub.record.fail_with = 401
try:
    model.push_to_hub("me/refused", token={token!r})
    refused = None
except HubUploadError as error:
    refused = {{"message": str(error), "repr": repr(error), "cause": repr(error.__cause__),
               "context": repr(error.__context__)}}
hub.record.echo_authorization = True
# The echo comes back as a response header, which the HTTP client itself logs at DEBUG; our lines stay checked.
for name in ("httpcore", "httpcore2"):
    logging.getLogger(name).setLevel(logging.INFO)
os.environ["HF_TOKEN"] = {environment_token!r}
try:
    model.push_to_hub("me/echoed")
    echoed = None
except HubUploadError as error:
    echoed = str(error)
record = hub.record
print(json.dumps({{
    "created": record.created,
    "files": {{repo: sorted(files) for repo, files in record.files.items()}},
    "token_in_files": any({token!r}.encode() in data for files in record.files.values() for data in files.values()),
    "authorizations": sorted(set(a for a in record.authorizations if a)),
    "refused": refused,
    "echoed": echoed,
}}))
"""


@pytest.fixture(scope="module")
def uploads(tiny_model_dir: Path) -> dict:
    environment = {key: value for key, value in os.environ.items() if key not in OFFLINE_SWITCHES}
    environment["UNSLOTH_MLX"] = "1"
    code = UPLOADS.format(
        root=str(REPO_ROOT), model=str(tiny_model_dir), token=TOKEN, environment_token=ENVIRONMENT_TOKEN
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=environment, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert TOKEN not in result.stderr, "the token appeared in a log line"
    assert ENVIRONMENT_TOKEN not in result.stderr, "the environment's token appeared in a log line"
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    answer["stderr"] = result.stderr
    return answer


def test_each_push_creates_its_repository_and_uploads_what_the_save_writes(uploads: dict) -> None:
    assert {"name": "lora", "organization": "me", "visibility": "private", "type": "model"} in uploads["created"]
    files = uploads["files"]
    assert {"adapters.safetensors", "adapter_config.json", "tokenizer.json"} <= set(files["me/lora"])
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(files["me/merged"])
    assert "unsloth.F16.gguf" in files["me/gguf"]


def test_the_token_is_sent_to_the_hub_and_nowhere_else(uploads: dict) -> None:
    assert uploads["authorizations"] == [f"Bearer {ENVIRONMENT_TOKEN}", f"Bearer {TOKEN}"]
    assert not uploads["token_in_files"]
    refused = uploads["refused"]
    assert refused is not None and "me/refused" in refused["message"] and "401" in refused["message"]
    assert all(TOKEN not in text for text in refused.values())
    assert refused["cause"] == "None" and refused["context"] == "None"


def test_a_token_from_hf_token_is_scrubbed_from_the_message_too(uploads: dict) -> None:
    # The stand-in echoed each request's Authorization header into the error's first line, as a proxy might.
    echoed = uploads["echoed"]
    assert echoed is not None and "me/echoed" in echoed and "401" in echoed
    assert "Bearer ***" in echoed and ENVIRONMENT_TOKEN not in echoed


def test_offline_push_names_the_repository_and_the_cause(load_public, caplog) -> None:
    from unsloth.mlx.models.hub import HubUploadError

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by this folder's conftest before huggingface_hub loads
    model, tokenizer = load_public(lora=True)
    with caplog.at_level(logging.DEBUG), pytest.raises(HubUploadError) as caught:
        model.push_to_hub("me/offline", token=TOKEN)
    assert "me/offline" in str(caught.value) and "HF_HUB_OFFLINE" in str(caught.value)
    assert TOKEN not in str(caught.value) and TOKEN not in caplog.text
    with pytest.raises(HubUploadError, match="repository id"):
        tokenizer.push_to_hub("", token=TOKEN)
