# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What a family needs beyond renaming, one module per kind: the shared reshapes and keys (`architectures`), and
the families with converters of their own (Gemma 4, latent attention, the Mamba 2 hybrids, Qwen 3.5)."""
