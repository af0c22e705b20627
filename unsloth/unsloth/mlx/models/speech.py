# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Speech checkpoints and keywords the MLX loaders cannot honour, each with its reason, refused before mlx-lm is asked.

The codec-LM text-to-speech models (Orpheus, Llasa, Oute, Spark) are llama or qwen2 checkpoints and load as text
models; only families whose architecture mlx-lm does not build are listed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

# model_type -> (the family's name, why it does not load on MLX).
REFUSED_SPEECH_FAMILIES: Dict[str, tuple] = {
    "csm": (
        "Sesame CSM",
        "a Llama backbone, a depth decoder and the Mimi codec, trained with a loss over both decoders; neither "
        "mlx-lm nor mlx-vlm builds the depth decoder or the codec",
    ),
    "whisper": (
        "Whisper",
        "an encoder-decoder speech recognizer over log-mel features; mlx-lm builds decoder-only text models, and no "
        "MLX Whisper here trains under Seq2SeqTrainer",
    ),
}
# A load keyword that only a refused family reads -> that family's model_type.
SPEECH_KEYWORDS: Dict[str, str] = {"whisper_language": "whisper", "whisper_task": "whisper"}


def family_refusal(model_type: str) -> str:
    name, reason = REFUSED_SPEECH_FAMILIES[model_type]
    return f"{model_type!r} ({name}) is not supported on MLX: it is {reason}; train it with CUDA Unsloth"


def keyword_refusal(keyword: str) -> str:
    """Why a speech keyword cannot be honoured: its family does not load on MLX."""
    name, _ = REFUSED_SPEECH_FAMILIES[SPEECH_KEYWORDS[keyword]]
    return f"{keyword} sets {name}'s decoding prompt, and {family_refusal(SPEECH_KEYWORDS[keyword])}"


def refuse_speech_checkpoint(owner: str, folder: str | Path) -> None:
    """Raise NotImplementedError naming the family when `folder` holds a speech checkpoint MLX cannot load."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return
    model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    if model_type in REFUSED_SPEECH_FAMILIES:
        raise NotImplementedError(f"{owner}: {family_refusal(model_type)}")
