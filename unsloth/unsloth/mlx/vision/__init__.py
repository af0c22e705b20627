# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Vision-language models through mlx-vlm: loading, collator, LoRA, training, generation, merged saves."""
