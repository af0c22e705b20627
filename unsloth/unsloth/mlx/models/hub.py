# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Hub uploads as notebooks call them: `model.push_to_hub`, `push_to_hub_merged`, `push_to_hub_gguf` and
`tokenizer.push_to_hub`, each saving into a temporary folder and sending it through `huggingface_hub`.

`HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` mean what they mean to `huggingface_hub`. Any failure (offline,
refused, unreachable) becomes one `HubUploadError` naming the repository and the cause; every token the upload
could have sent (the argument, `HF_TOKEN`, the stored login) is scrubbed from that text, and the original
exception is not chained, so it cannot surface in a traceback or a log.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional


class HubUploadError(RuntimeError):
    """A push to the Hub failed; the message names the repository and the cause."""


# Shorter values are not plausible tokens, and replacing them would garble the message.
MIN_SCRUBBED_LENGTH = 8


def _known_tokens(token: Optional[str]) -> list:
    """Every token `huggingface_hub` could have sent, read without any network call; longest first."""
    candidates = [token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")]
    with contextlib.suppress(Exception):
        from huggingface_hub import constants

        candidates.append(Path(constants.HF_TOKEN_PATH).read_text())
    tokens = {candidate.strip() for candidate in candidates if isinstance(candidate, str)}
    return sorted((t for t in tokens if len(t) >= MIN_SCRUBBED_LENGTH), key=len, reverse=True)


def _scrubbed(text: str, token: Optional[str]) -> str:
    for secret in _known_tokens(token):
        text = text.replace(secret, "***")
    return text


def _cause(error: BaseException) -> str:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(error, OfflineModeIsEnabled):
        return "offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set), so nothing can be uploaded"
    if isinstance(error, HfHubHTTPError):
        status = getattr(getattr(error, "response", None), "status_code", None)
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"the Hub answered HTTP {status}: {first_line}" if status else first_line
    return f"{type(error).__name__}: {error}"


def upload_folder(
    folder: Path, repo_id: str, token: Optional[str] = None, private: Optional[bool] = None, commit_message: str = ""
) -> str:
    """Create `repo_id` if needed and upload `folder`'s files to it; returns the commit's URL."""
    from huggingface_hub import HfApi

    if not isinstance(repo_id, str) or not repo_id.strip():
        raise HubUploadError(f"push_to_hub needs a repository id such as 'your_name/model', got {repo_id!r}")
    failure: Optional[str] = None
    try:
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message or "Upload"
        )
        return str(getattr(info, "commit_url", info))
    except Exception as error:  # every failure becomes one message; the chain could carry request headers
        failure = _scrubbed(_cause(error), token)
    raise HubUploadError(f"could not push to the Hub repository {repo_id!r}: {failure}")


def push_saved(
    save: Callable[[Path], Any], repo_id: str, token: Optional[str], private: Optional[bool], commit_message: str
) -> str:
    """Run `save(folder)` into a temporary folder, then upload what it wrote."""
    with tempfile.TemporaryDirectory(prefix="unsloth-push-") as scratch:
        folder = Path(scratch)
        save(folder)
        return upload_folder(folder, repo_id, token=token, private=private, commit_message=commit_message)


def model_push_to_hub(
    model: Any,
    repo_id: str,
    tokenizer: Any = None,
    token: Optional[str] = None,
    private: Optional[bool] = None,
    commit_message: str = "Upload model trained with Unsloth on MLX",
    **kwargs: Any,
) -> str:
    """`model.push_to_hub`: what `model.save_pretrained` writes (the adapter of a LoRA model)."""
    _refuse(kwargs, "push_to_hub")
    return push_saved(lambda f: model.save_pretrained(f, tokenizer), repo_id, token, private, commit_message)


def push_to_hub_merged(
    model: Any,
    repo_id: str,
    tokenizer: Any = None,
    save_method: str = "merged_16bit",
    token: Optional[str] = None,
    private: Optional[bool] = None,
    commit_message: str = "Upload merged model trained with Unsloth on MLX",
    **kwargs: Any,
) -> str:
    """`model.push_to_hub_merged`: what `save_pretrained_merged` writes, uploaded."""
    _refuse(kwargs, "push_to_hub_merged")

    def save(folder: Path) -> None:
        model.save_pretrained_merged(folder, tokenizer, save_method=save_method)

    return push_saved(save, repo_id, token, private, commit_message)


def push_to_hub_gguf(
    model: Any,
    repo_id: str,
    tokenizer: Any = None,
    quantization_method: Any = None,
    token: Optional[str] = None,
    private: Optional[bool] = None,
    commit_message: str = "Upload GGUF trained with Unsloth on MLX",
    **kwargs: Any,
) -> str:
    """`model.push_to_hub_gguf`: what `save_pretrained_gguf` writes, uploaded."""
    _refuse(kwargs, "push_to_hub_gguf")

    def save(folder: Path) -> None:
        method = {} if quantization_method is None else {"quantization_method": quantization_method}
        model.save_pretrained_gguf(folder, tokenizer, **method)

    return push_saved(save, repo_id, token, private, commit_message)


def tokenizer_push_to_hub(
    tokenizer: Any,
    repo_id: str,
    token: Optional[str] = None,
    private: Optional[bool] = None,
    commit_message: str = "Upload tokenizer",
    **kwargs: Any,
) -> str:
    """`tokenizer.push_to_hub`, through the same upload and the same one-message failures as the model's."""
    _refuse(kwargs, "tokenizer.push_to_hub")
    return push_saved(lambda f: tokenizer.save_pretrained(str(f)), repo_id, token, private, commit_message)


# Keywords of the CUDA calls that change nothing about what is uploaded here.
_INERT = {"use_temp_dir", "max_shard_size", "safe_serialization", "create_pr", "revision", "temporary_location"}


def _refuse(kwargs: dict, owner: str) -> None:
    unknown = sorted(set(kwargs) - _INERT)
    if unknown:
        raise NotImplementedError(f"{owner} on MLX does not support {', '.join(unknown)}")
