# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper on MLX: a Hugging Face checkpoint loaded into mlx-audio's Whisper, the one module that imports it.

mlx-audio's model renames transformers' weights (`q_proj` to `query`, `fc1` to `mlp1`, ...) and computes what
transformers' `WhisperForConditionalGeneration` does, with the mel frames last-axis channels. The model keeps the
checkpoint's `config` and `generation_config` as transformers' objects, which the notebook's cells set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Tuple

import mlx.core as mx

# transformers' Whisper names -> mlx-audio's, for the linears LoRA can wrap.
MLX_NAMES = {
    "q_proj": "query",
    "k_proj": "key",
    "v_proj": "value",
    "out_proj": "out",
    "fc1": "mlp1",
    "fc2": "mlp2",
}
ATTENTIONS = ("attn", "cross_attn")
WHISPER_MARK = "_unsloth_whisper"
# Published Whisper checkpoints widen each MLP four times; mlx-audio's model builds only that width.
MLP_RATIO = 4


# Where the checkpoint came from, for the adapter's `base_model_name_or_path` and the merged save's tensors.
SOURCE_ATTRIBUTE = "_unsloth_whisper_source"


def _generate_without_beams(audio_generate: Any) -> Any:
    """mlx-audio's `generate`, refusing transformers' `num_beams` above 1, which it would drop without a word."""

    def generate(*args: Any, num_beams: Optional[int] = None, **kwargs: Any) -> Any:
        if num_beams is not None and num_beams > 1:
            raise NotImplementedError(
                f"model.generate(num_beams={num_beams}) on MLX Whisper: beam search is not built (mlx-audio's "
                "decoder is greedy and would ignore num_beams); leave num_beams at 1"
            )
        return audio_generate(*args, **kwargs)

    return generate


def is_whisper(model: Any) -> bool:
    return bool(getattr(model, WHISPER_MARK, False))


def is_whisper_folder(folder: str | Path) -> bool:
    path = Path(folder) / "config.json"
    return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("model_type") == "whisper"


def _check_widths(config: Any) -> None:
    for side in ("encoder", "decoder"):
        width = getattr(config, f"{side}_ffn_dim")
        if width != MLP_RATIO * config.d_model:
            raise NotImplementedError(
                f"this Whisper's {side}_ffn_dim is {width}, not {MLP_RATIO} x d_model ({config.d_model}); "
                "mlx-audio's Whisper, which MLX runs, builds only that width"
            )


def _weights(folder: Path) -> dict:
    weights: dict = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(mx.load(str(path)))
    if not weights:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights")
    return weights


def load_whisper(
    folder: str | Path, language: Optional[str], task: Optional[str], dtype: Any = None
) -> Tuple[Any, Any]:
    """The MLX Whisper and its `WhisperProcessor`, whose tokenizer puts the language and task tokens first."""
    try:
        from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions
    except ImportError as error:
        raise ImportError(
            f"Whisper on MLX runs mlx-audio's model, which did not import ({error}); "
            "install it with `pip install --no-deps mlx-audio==0.6.2`"
        ) from error
    from transformers import GenerationConfig, WhisperConfig, WhisperProcessor

    folder = Path(folder)
    config = WhisperConfig.from_pretrained(str(folder))
    _check_widths(config)
    weights = _weights(folder)
    chosen = dtype or next(value.dtype for value in weights.values() if mx.issubdtype(value.dtype, mx.floating))
    model = Model(ModelDimensions.from_dict(config.to_dict()), dtype=chosen)
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    setattr(model, WHISPER_MARK, True)
    setattr(model, SOURCE_ATTRIBUTE, str(folder))
    model.generate = _generate_without_beams(model.generate)
    model.config = config
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(folder))
    except OSError:
        model.generation_config = GenerationConfig.from_model_config(config)
    processor = WhisperProcessor.from_pretrained(str(folder), language=language, task=task)
    return model, processor
