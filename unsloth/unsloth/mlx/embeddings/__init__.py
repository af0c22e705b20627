# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Embedding models under sentence-transformers' names: loading over mlx-embeddings, pooling, encode, MNRL, saves."""
