# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Speech checkpoints and keywords the MLX loaders cannot honour, each with its reason, refused before mlx-lm is asked.

The codec-LM text-to-speech models (Orpheus, Llasa, Oute, Spark) are llama or qwen2 checkpoints and load as text
models; Whisper and CSM load through `speech` (FastModel), and the text loaders send them there by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

# model_type -> why the text loaders do not load it, and what to do instead.
REFUSED_SPEECH_FAMILIES: Dict[str, str] = {
    "csm": (
        "Sesame CSM is a Llama backbone, a depth decoder and the Mimi codec, which the text loaders do not build; "
        "load it with FastModel.from_pretrained(..., auto_model=CsmForConditionalGeneration)"
    ),
    "whisper": (
        "Whisper is an encoder-decoder speech recognizer, which the text loaders do not build; load it with "
        "FastModel.from_pretrained(..., auto_model=WhisperForConditionalGeneration)"
    ),
}
# Load keywords only a Whisper checkpoint reads (through `speech.loading`).
SPEECH_KEYWORDS = ("whisper_language", "whisper_task")


def keyword_refusal(keyword: str) -> str:
    """Why a speech keyword cannot be honoured on this load: its checkpoint is not of the keyword's family."""
    return (
        f"{keyword} sets Whisper's decoding prompt, and this checkpoint is not a Whisper; load a 'whisper' "
        "checkpoint with FastModel.from_pretrained(..., auto_model=WhisperForConditionalGeneration)"
    )


def refuse_speech_checkpoint(owner: str, folder: str | Path) -> None:
    """Raise NotImplementedError naming the family when `folder` holds a speech checkpoint MLX cannot load."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return
    model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    if model_type in REFUSED_SPEECH_FAMILIES:
        raise NotImplementedError(f"{owner}: {model_type!r}: {REFUSED_SPEECH_FAMILIES[model_type]}")
