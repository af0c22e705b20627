# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""llama.cpp's `gpt2` vocabulary keys for a byte-level BPE tokenizer, read from its `tokenizer.json`.

`mlx_lm`'s converter describes every vocabulary as SentencePiece (`tokenizer.ggml.model = "llama"`), which
llama.cpp cannot tokenize text with when the tokens are byte-level BPE ones (it aborts); these keys replace it.
Only the GPT-2 pre-tokenizer is recognised; any other tokenizer keeps the converter's keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

# GGUF key: (value, GGUFValueType name, array item type name or None); gguf is imported by the writer only.
VocabularyKeys = Dict[str, Tuple[Any, str, Optional[str]]]
REPLACED_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                 "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
# llama.cpp's token types (gguf.TokenType).
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5


def _gpt2_pre_tokenizer(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("type") == "ByteLevel" and spec.get("use_regex", True)


def byte_level_bpe_keys(folder: Path, vocab_size: int) -> Optional[VocabularyKeys]:
    """The vocabulary keys for `folder`'s tokenizer.json, or None when it is not a GPT-2 style byte-level BPE."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not _gpt2_pre_tokenizer(spec.get("pre_tokenizer")):
        return None
    # Embedding rows no token uses (vocabularies padded to a round size) get llama.cpp's placeholder names.
    tokens = [f"[PAD{index}]" for index in range(vocab_size)]
    types = [_UNUSED] * vocab_size
    for token, index in model["vocab"].items():
        if index < vocab_size:
            tokens[index], types[index] = token, _NORMAL
    for added in spec.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = _CONTROL if added.get("special") else _USER_DEFINED
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges", [])]
    return {
        "tokenizer.ggml.model": ("gpt2", "STRING", None),
        "tokenizer.ggml.pre": ("gpt-2", "STRING", None),
        "tokenizer.ggml.tokens": (tokens, "ARRAY", "STRING"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
        "tokenizer.ggml.merges": (merges, "ARRAY", "STRING"),
    }
