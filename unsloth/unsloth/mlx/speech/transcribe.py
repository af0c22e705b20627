# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper transcription on MLX, behind transformers' `pipeline("automatic-speech-recognition", model=model, ...)`:
greedy decoding after the tokenizer's forced prefix (`<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`)
until `<|endoftext|>`, as the notebook's training labels run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import mlx.core as mx
import numpy as np

# What the notebook's pipeline call passes that changes nothing on MLX: the model keeps its own dtype and device.
NO_EFFECT = ("torch_dtype", "dtype", "device", "device_map", "return_language", "framework")


def greedy_ids(model: Any, mel: np.ndarray, prompt: List[int], end_token: int, new_tokens: int) -> List[int]:
    """The ids generated after `prompt` for one clip's mel frames (frames first), greedy, with the model's
    `generation_config.suppress_tokens` never chosen and its `begin_suppress_tokens` not chosen first, as
    transformers' Whisper logits processors do."""
    settings = getattr(model, "generation_config", None)
    suppressed = list(getattr(settings, "suppress_tokens", None) or [])
    at_begin = list(getattr(settings, "begin_suppress_tokens", None) or [])
    audio = model.encoder(mx.array(mel[None]).astype(model.dtype))
    logits, cache, _ = model.decoder(mx.array([prompt]), audio)
    generated: List[int] = []
    while len(generated) < new_tokens:
        scores = logits[0, -1].astype(mx.float32)
        banned = suppressed + (at_begin if not generated else [])
        if banned:
            scores[mx.array(banned)] = -mx.inf
        token = int(mx.argmax(scores).item())
        if token == end_token:
            break
        generated.append(token)
        logits, cache, _ = model.decoder(mx.array([[token]]), audio, kv_cache=cache)
    return generated


def greedy_transcription(model: Any, tokenizer: Any, mel: np.ndarray) -> List[int]:
    """The ids generated after the tokenizer's forced prefix until `<|endoftext|>` or the decoder's last position."""
    prefix = list(tokenizer.prefix_tokens)
    return greedy_ids(model, mel, prefix, tokenizer.eos_token_id, model.dims.n_text_ctx - len(prefix))


def _waveform(inputs: Any, sampling_rate: int) -> np.ndarray:
    """A waveform at the feature extractor's rate: an array, transformers' {"array"/"raw", "sampling_rate"}, or a
    sound file's path (read with soundfile)."""
    if isinstance(inputs, (str, Path)):
        try:
            import soundfile
        except ImportError as error:
            raise ImportError(
                f"the MLX Whisper pipeline reads {inputs} with soundfile, which did not import ({error}); "
                "install it, or pass the waveform as an array"
            ) from error

        inputs = dict(zip(("array", "sampling_rate"), soundfile.read(str(inputs), dtype="float32")))
    if isinstance(inputs, dict):
        rate = inputs.get("sampling_rate", sampling_rate)
        if rate != sampling_rate:
            raise NotImplementedError(
                f"audio at {rate} Hz: the MLX Whisper pipeline does not resample; pass audio at the feature "
                f"extractor's {sampling_rate} Hz"
            )
        inputs = inputs["array"] if "array" in inputs else inputs["raw"]
    waveform = np.asarray(inputs, dtype=np.float32)
    return waveform.mean(axis=-1) if waveform.ndim == 2 else waveform


class WhisperTranscriber:
    """What `pipeline("automatic-speech-recognition", model=<MLX Whisper>)` returns: called on audio, {"text": ...}."""

    task = "automatic-speech-recognition"

    def __init__(self, model: Any, tokenizer: Any, feature_extractor: Any) -> None:
        self.model, self.tokenizer, self.feature_extractor = model, tokenizer, feature_extractor

    def transcribe(self, inputs: Any) -> Dict[str, str]:
        rate = self.feature_extractor.sampling_rate
        features = self.feature_extractor(_waveform(inputs, rate), sampling_rate=rate).input_features[0]
        # transformers' features are (mel bins, frames); mlx-audio's model reads frames first.
        ids = greedy_transcription(self.model, self.tokenizer, np.asarray(features, dtype=np.float32).T)
        return {"text": self.tokenizer.decode(ids, skip_special_tokens=True)}

    def __call__(self, inputs: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise NotImplementedError(
                f"the MLX Whisper pipeline transcribes greedily with the forced prefix; it cannot honour "
                f"{', '.join(sorted(kwargs))}"
            )
        if isinstance(inputs, list):
            return [self.transcribe(one) for one in inputs]
        return self.transcribe(inputs)
