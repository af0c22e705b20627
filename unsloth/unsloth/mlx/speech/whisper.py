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
import numpy as np

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


# transformers' Whisper `generate` keywords honoured for `input_features`; attention_mask only counts frames for
# long-form audio, which one window never is.
GENERATE_KEYWORDS = frozenset(
    {
        "num_beams",
        "num_return_sequences",
        "length_penalty",
        "early_stopping",
        "max_new_tokens",
        "max_length",
        "language",
        "task",
        "do_sample",
        "suppress_tokens",
        "begin_suppress_tokens",
    }
)
NO_EFFECT_KEYWORDS = frozenset({"attention_mask", "use_cache"})


def _transformers_generate(model: Any, input_features: Any, kwargs: dict) -> Any:
    """transformers' `WhisperForConditionalGeneration.generate(input_features, ...)` on clips of one window: the ids
    after the prompt, right-padded with the pad token, a torch tensor for torch features and numpy otherwise."""
    from .generation import generate_ids, new_token_budget, resolve_decoding, whisper_prompt

    unknown = sorted(set(kwargs) - GENERATE_KEYWORDS - NO_EFFECT_KEYWORDS)
    if unknown:
        raise NotImplementedError(
            f"model.generate(input_features, ...) on MLX Whisper takes {', '.join(sorted(GENERATE_KEYWORDS))}; it "
            f"cannot honour {', '.join(unknown)}"
        )
    features = np.asarray(
        input_features.detach().cpu().float().numpy() if hasattr(input_features, "detach") else input_features,
        dtype=np.float32,
    )
    frames = 2 * model.dims.n_audio_ctx
    if features.ndim != 3 or features.shape[1:] != (model.dims.n_mels, frames):
        raise NotImplementedError(
            f"model.generate on MLX Whisper takes input_features of shape (clips, {model.dims.n_mels}, {frames}), "
            f"one window each, as the feature extractor pads them; got {features.shape} (long-form audio is not built)"
        )
    settings = model.generation_config
    prompt = whisper_prompt(settings, kwargs.get("language"), kwargs.get("task"))
    max_length = kwargs.get("max_length", settings.max_length)
    max_new = kwargs.get("max_new_tokens", settings.max_new_tokens)
    new_tokens = new_token_budget(model.dims.n_text_ctx, len(prompt), max_length, max_new)
    chosen = {name: kwargs[name] for name in GENERATE_KEYWORDS - {"language", "task"} if name in kwargs}
    rows = generate_ids(model, features.transpose(0, 2, 1), resolve_decoding(settings, prompt, new_tokens, chosen))
    ids = np.full((len(rows), max(map(len, rows))), settings.pad_token_id, dtype=np.int64)
    for slot, row in enumerate(rows):
        ids[slot, : len(row)] = row
    if hasattr(input_features, "detach"):
        import torch

        return torch.from_numpy(ids)
    return ids


def _whisper_generate(model: Any, audio_generate: Any) -> Any:
    """`generate` as transformers' Whisper takes it (`input_features`, greedy or beam search), and as mlx-audio's
    transcription call (a waveform or a path), which is greedy and would drop `num_beams` without a word."""

    def generate(*args: Any, input_features: Any = None, **kwargs: Any) -> Any:
        if input_features is None and args and getattr(args[0], "ndim", None) == 3:
            input_features, args = args[0], args[1:]
        if input_features is not None and not args:
            return _transformers_generate(model, input_features, kwargs)
        beams = kwargs.pop("num_beams", None)
        if beams is not None and beams > 1:
            raise NotImplementedError(
                f"model.generate(audio, num_beams={beams}) on MLX Whisper: mlx-audio's transcription call decodes "
                "greedily and would ignore num_beams; pass the feature extractor's input_features, as transformers' "
                "Whisper takes them (model.generate(input_features=..., num_beams=...)), for beam search"
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
    model.generate = _whisper_generate(model, model.generate)
    model.config = config
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(folder))
    except OSError:
        model.generation_config = GenerationConfig.from_model_config(config)
    processor = WhisperProcessor.from_pretrained(str(folder), language=language, task=task)
    return model, processor
