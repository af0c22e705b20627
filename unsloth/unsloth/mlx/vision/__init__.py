# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Vision-language models through mlx-vlm: loading, collator, LoRA, training, generation, merged saves."""

# Whatever of vision is imported first, the trainer below (which cannot import vision) learns of the collator's rows.
from . import trainer_rows  # noqa: F401
