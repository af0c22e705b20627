# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""One registered `Converter` per family (`base`), grouped by kind: the dense families (`plain`), the experts
(`experts`, Llama 4 and Step 3.5 among them), LFM2, Granite and RWKV-7 (`hybrids`), Gemma 4, Gemma 3n, latent
attention (GLM-5's indexer too), the Mamba 2 hybrids, and the delta nets: Qwen 3.5, Qwen3-Next and Kimi Linear
(`qwen35`), with the reshapes several share in `architectures`. Each module
lists its entries in `CONVERTERS`; the sentence-embedding models (`embeddings`) list theirs in
`EMBEDDING_CONVERTERS`."""
