# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Text models on MLX: loading, LoRA, generation, quantization, merged saves and Hub pushes."""
