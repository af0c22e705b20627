# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The MLX trainer behind SFTTrainer: its arguments, training rows, embedding rate and checks."""
