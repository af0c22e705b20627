# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Preference and RL trainers on MLX (DPO, ORPO, GRPO), under TRL's names."""
