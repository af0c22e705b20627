# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Speech models on MLX: Whisper through mlx-audio's model, with its LoRA, training rows and step."""

# Whatever of speech is imported first, the trainer below (which cannot import speech) learns of Whisper's rows.
from . import trainer_rows  # noqa: F401
