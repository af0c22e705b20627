# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The per-family entry points older notebooks import (`FastLlamaModel`, `FastQwen2Model`, ...), on MLX.

CUDA Unsloth keeps one patched class per architecture; mlx-lm picks the architecture from the model's
config.json, so each name here is `FastLanguageModel` itself and loads any family (`FastTextModel` is `FastModel`,
as upstream).
"""

from __future__ import annotations

from .fast_model import FastModel
from .language import FastLanguageModel

FastLlamaModel = FastLanguageModel
FastMistralModel = FastLanguageModel
FastQwen2Model = FastLanguageModel
FastQwen3Model = FastLanguageModel
FastQwen3MoeModel = FastLanguageModel
FastGemmaModel = FastLanguageModel
FastGemma2Model = FastLanguageModel
FastCohereModel = FastLanguageModel
FastGraniteModel = FastLanguageModel
FastFalconH1Model = FastLanguageModel
FastTextModel = FastModel
