# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""CUDA-era names answered on MLX: torch.cuda memory calls and TRL's trainer names."""
