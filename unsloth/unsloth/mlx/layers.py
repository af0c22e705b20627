# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The order the subpackages of `unsloth.mlx` import each other in: each may import only those listed before it.

The modules directly under `unsloth/mlx/` (`__init__.py`, `activation.py`, this one) sit above every layer.
`tests/test_mlx_layers.py` reads this tuple without importing it and fails on any import against it.
"""

LAYERS = ("chat", "gguf", "models", "training", "speech", "vision", "embeddings", "rl", "compat")

# Upward imports not yet inverted, as (file under unsloth/mlx, layer it imports); the test fails once one is gone.
PENDING_UPWARD_IMPORTS = ()
