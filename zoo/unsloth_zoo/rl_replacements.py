# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""CUDA `unsloth_zoo.rl_replacements` holds torch.compile'd kernels patched into TRL's generated trainers.

Notebooks import `_maybe_compile` and `torch_compile_options` from it to recompile and swap one of those kernels
(`RL_REPLACEMENTS[...]`). On MLX no such trainer or kernel exists, so a pass-through would let the patch cell run
while changing nothing; importing this module refuses instead, naming why.
"""

raise ImportError(
    "unsloth_zoo.rl_replacements is CUDA Unsloth's torch.compile machinery (_maybe_compile, torch_compile_options, "
    "RL_REPLACEMENTS) patched into TRL's generated trainers; torch.compile has no meaning on MLX, where GRPOTrainer "
    "computes its log-probabilities in MLX, so a patch of those kernels would change nothing: leave that cell out."
)
