# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Whisper transcription on MLX, behind transformers' `pipeline("automatic-speech-recognition", model=model, ...)`:
the tokenizer's forced prefix (`<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`), then Whisper's
`generate` (`generation.py`: greedy, or beam search with `generate_kwargs={"num_beams": ...}`) until
`<|endoftext|>`, as the notebook's training labels run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from .generation import generate_ids, new_token_budget, resolve_decoding

# What the notebook's pipeline call passes that changes nothing on MLX: the model keeps its own dtype and device.
NO_EFFECT = ("torch_dtype", "dtype", "device", "device_map", "return_language", "framework")
# What the MLX pipeline hands to Whisper's generate, in `generate_kwargs` or as keywords of their own, as
# transformers' pipeline takes them; any other call option (timestamps, chunking) is refused by name.
GENERATE_KEYWORDS = ("num_beams", "length_penalty", "early_stopping", "max_new_tokens", "max_length", "do_sample")


def checked_generate_kwargs(generate_kwargs: Optional[dict]) -> dict:
    chosen = dict(generate_kwargs or {})
    unknown = sorted(set(chosen) - set(GENERATE_KEYWORDS))
    if unknown:
        raise NotImplementedError(
            f"the MLX Whisper pipeline hands {', '.join(GENERATE_KEYWORDS)} to generate; it cannot honour "
            f"{', '.join(unknown)}"
        )
    return chosen


def transcription_ids(model: Any, tokenizer: Any, mel: np.ndarray, generate_kwargs: dict) -> List[int]:
    """The ids generated after the tokenizer's forced prefix until `<|endoftext|>` or the generation config's
    length, with its suppressed tokens, as transformers' Whisper `generate` gives them."""
    prefix = list(tokenizer.prefix_tokens)
    settings = model.generation_config
    chosen = {**generate_kwargs, "eos_token_id": tokenizer.eos_token_id}
    max_length = chosen.pop("max_length", settings.max_length)
    max_new = chosen.pop("max_new_tokens", settings.max_new_tokens)
    new_tokens = new_token_budget(model.dims.n_text_ctx, len(prefix), max_length, max_new)
    return generate_ids(model, mel[None], resolve_decoding(settings, prefix, new_tokens, chosen))[0]


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

    def __init__(
        self, model: Any, tokenizer: Any, feature_extractor: Any, generate_kwargs: Optional[dict] = None
    ) -> None:
        self.model, self.tokenizer, self.feature_extractor = model, tokenizer, feature_extractor
        self.generate_kwargs = checked_generate_kwargs(generate_kwargs)

    def transcribe(self, inputs: Any, generate_kwargs: dict) -> Dict[str, str]:
        rate = self.feature_extractor.sampling_rate
        features = self.feature_extractor(_waveform(inputs, rate), sampling_rate=rate).input_features[0]
        # transformers' features are (mel bins, frames); mlx-audio's model reads frames first.
        mel = np.asarray(features, dtype=np.float32).T
        ids = transcription_ids(self.model, self.tokenizer, mel, generate_kwargs)
        return {"text": self.tokenizer.decode(ids, skip_special_tokens=True)}

    def __call__(self, inputs: Any, generate_kwargs: Optional[dict] = None, **kwargs: Any) -> Any:
        # Keyword by keyword, the call's come before the pipeline's, as transformers' pipeline merges them.
        chosen = {**self.generate_kwargs, **checked_generate_kwargs({**(generate_kwargs or {}), **kwargs})}
        if isinstance(inputs, list):
            return [self.transcribe(one, chosen) for one in inputs]
        return self.transcribe(inputs, chosen)
