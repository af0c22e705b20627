# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""BERT embedding models (all-MiniLM-L6-v2) as llama.cpp's `bert` architecture: bidirectional attention, the
sentence pooling written as a key, and the WordPiece vocabulary in llama.cpp's phantom-space form.

The sentence pooling is not in `config.json` (sentence-transformers keeps it in `1_Pooling`), so the embedding
saver passes it in the config under `POOLING_KEY`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import numpy as np

from ..families import Family, UnsupportedModel
from ..tokenizer import CONTROL, NORMAL, UNKNOWN, TokenizerKeys
from .base import Converter

POOLING_KEY = "sentence_pooling"
# Our pooling names to llama.cpp's pooling types (gguf.PoolingType): mean, the first token, the last token.
POOLING_TYPES = {"mean": 1, "cls": 2, "lasttoken": 3}
# Weights llama.cpp's bert graph has no tensor for: the classifier's pooler and the position id buffer.
_UNUSED_PREFIXES = ("pooler.", "embeddings.position_ids")
# tokenizer_config.json's special tokens to the GGUF keys llama.cpp reads them from.
_SPECIAL_KEYS = {
    "cls_token": "tokenizer.ggml.cls_token_id",
    "sep_token": "tokenizer.ggml.seperator_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
    "mask_token": "tokenizer.ggml.mask_token_id",
}
# llama.cpp's graph computes GELU; the tanh approximation and other activations are not what HF's BERT ran.
_ACTIVATIONS = {"gelu"}


class Bert(Converter):
    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModel(
                f"GGUF export writes BERT with absolute positions only, not {config['position_embedding_type']!r}"
            )
        if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise UnsupportedModel(f"llama.cpp's bert graph computes GELU, not {config['hidden_act']!r}")
        if config.get(POOLING_KEY) not in POOLING_TYPES:
            raise UnsupportedModel(
                f"llama.cpp pools a bert model by {', '.join(POOLING_TYPES)} only, not {config.get(POOLING_KEY)!r}"
            )

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {name: value for name, value in weights.items() if not name.startswith(_UNUSED_PREFIXES)}

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        writer.add_causal_attention(False)
        writer.add_pooling_type(gguf.PoolingType(POOLING_TYPES[config[POOLING_KEY]]))
        writer.add_token_type_count(int(config.get("type_vocab_size") or 1))


def wordpiece_keys(folder: Path, vocab_size: int) -> TokenizerKeys:
    """llama.cpp's `bert` vocabulary: a word's first piece gets a leading U+2581, a `##` piece loses its `##`."""
    spec = json.loads((Path(folder) / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece":
        raise UnsupportedModel(f"a BERT GGUF needs a WordPiece tokenizer, not {model.get('type')!r}")
    config = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
    by_id = {index: token for token, index in model["vocab"].items()}
    special = {entry["content"] for entry in spec.get("added_tokens") or [] if entry.get("special")}
    tokens, types = [], []
    for index in range(vocab_size):
        token = by_id.get(index, f"[PAD{index}]")
        if token in special:
            tokens.append(token)
            types.append(UNKNOWN if token == model.get("unk_token") else CONTROL)
        else:
            tokens.append(token[2:] if token.startswith("##") else "\u2581" + token)
            types.append(NORMAL)
    keys: TokenizerKeys = {
        "tokenizer.ggml.model": ("bert", "STRING", None),
        "tokenizer.ggml.pre": ("default", "STRING", None),
        "tokenizer.ggml.tokens": (tokens, "ARRAY", "STRING"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
    }
    for name, key in _SPECIAL_KEYS.items():
        token = config.get(name)
        if isinstance(token, str) and token in model["vocab"]:
            keys[key] = (model["vocab"][token], "UINT32", None)
    # llama.cpp starts each text with its BOS, which for a bert vocabulary is [CLS] (101 unless told).
    if "tokenizer.ggml.cls_token_id" in keys:
        keys["tokenizer.ggml.bos_token_id"] = keys["tokenizer.ggml.cls_token_id"]
    return keys


CONVERTERS = {"bert": Bert(Family("bert"))}
