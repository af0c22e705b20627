# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""One registered `Converter` per family (`base`), grouped by kind: the dense families (`plain`), the experts
(`experts`, Llama 4 among them), LFM2 and Granite (`hybrids`), Gemma 4, Gemma 3n, latent attention, the Mamba 2
hybrids, and Qwen 3.5 with Qwen3-Next (`qwen35`), with the reshapes several share in `architectures`. Each module
lists its entries in `CONVERTERS`; the sentence-embedding models (`embeddings`) list theirs in
`EMBEDDING_CONVERTERS`."""
