# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""An embedding model's vocabulary keys, by its `tokenizer.json` model type: WordPiece in llama.cpp's phantom-space
form (`wordpiece_keys`), XLM-RoBERTa's SentencePiece unigram as llama.cpp's `t5` vocabulary (`unigram_keys`), BPE as
the text models write it, an encoder's CLS / SEP as its BOS / EOS (`byte_level_keys`)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Callable, Dict, Sequence

from .families import UnsupportedModel
from .tokenizer import (
    CONTROL,
    NORMAL,
    UNKNOWN,
    UNUSED,
    USER_DEFINED,
    TokenizerKeys,
    _adds_space_prefix,
    _pieces,
    special_token_keys,
    tokenizer_keys,
)

# tokenizer_config.json's special tokens to the GGUF keys llama.cpp reads them from.
_SPECIAL_KEYS = {
    "cls_token": "tokenizer.ggml.cls_token_id",
    "sep_token": "tokenizer.ggml.seperator_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
    "mask_token": "tokenizer.ggml.mask_token_id",
}


def _read(folder: Path, name: str) -> dict:
    path = Path(folder) / name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def wordpiece_keys(folder: Path, vocab_size: int) -> TokenizerKeys:
    """llama.cpp's `bert` vocabulary: a word's first piece gets a leading U+2581, a `##` piece loses its `##`."""
    spec, config = _read(folder, "tokenizer.json"), _read(folder, "tokenizer_config.json")
    model = spec.get("model") or {}
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


# Normalizers llama.cpp's UGM tokenizer reproduces: SentencePiece's character map, and collapsing runs of spaces.
_UNIGRAM_NORMALIZERS = {"Precompiled", "Replace"}


def unigram_keys(folder: Path, vocab_size: int) -> TokenizerKeys:
    """llama.cpp's `t5` (UGM) vocabulary: each piece with its log-probability, the NFKC character map, and the
    word-start mark and space handling of the tokenizer's normalizer and pre-tokenizer."""
    spec, config = _read(folder, "tokenizer.json"), _read(folder, "tokenizer_config.json")
    normalizers = _pieces(spec.get("normalizer"))
    unknown = [piece["type"] for piece in normalizers if piece.get("type") not in _UNIGRAM_NORMALIZERS]
    if unknown:
        raise UnsupportedModel(f"llama.cpp's unigram tokenizer does not apply the normalizers {unknown}")
    tokens = [f"[PAD{index}]" for index in range(vocab_size)]
    scores, types = [-10000.0] * vocab_size, [UNUSED] * vocab_size
    for index, (piece, score) in enumerate(spec["model"]["vocab"][:vocab_size]):
        tokens[index], scores[index], types[index] = piece, float(score), NORMAL
    for added in spec.get("added_tokens") or []:
        if added["id"] < vocab_size:
            types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    if spec["model"].get("unk_id") is not None:
        types[int(spec["model"]["unk_id"])] = UNKNOWN
    pre_tokenizers = {piece.get("type") for piece in _pieces(spec.get("pre_tokenizer"))}
    collapses = "WhitespaceSplit" in pre_tokenizers or any(p.get("type") == "Replace" for p in normalizers)
    keys: TokenizerKeys = {
        "tokenizer.ggml.model": ("t5", "STRING", None),
        "tokenizer.ggml.pre": ("default", "STRING", None),
        "tokenizer.ggml.tokens": (tokens, "ARRAY", "STRING"),
        "tokenizer.ggml.scores": (scores, "ARRAY", "FLOAT32"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
        "tokenizer.ggml.add_space_prefix": (_adds_space_prefix(spec), "BOOL", None),
        "tokenizer.ggml.remove_extra_whitespaces": (collapses, "BOOL", None),
    }
    for piece in normalizers:
        if piece.get("type") == "Precompiled" and piece.get("precompiled_charsmap"):
            charsmap = base64.b64decode(piece["precompiled_charsmap"])
            keys["tokenizer.ggml.precompiled_charsmap"] = (list(charsmap), "ARRAY", "UINT8")
    keys.update(special_token_keys(spec, config, tokens))
    ids = {token: index for index, token in enumerate(tokens)}
    for name, key in _SPECIAL_KEYS.items():
        token = config.get(name)
        if isinstance(token, str) and token in ids:
            keys[key] = (ids[token], "UINT32", None)
    return keys


# An encoder's tokenizer that names no BOS or EOS starts each text with its CLS and ends it with its SEP, which
# llama.cpp reads as BOS and EOS (gguf-py's `SpecialVocab` rule, what gte-modernbert-base's file holds).
_STAND_INS = {"bos_token": "cls_token", "eos_token": "sep_token"}


def byte_level_keys(folder: Path, vocab_size: int) -> TokenizerKeys:
    """llama.cpp's `gpt2` vocabulary as the text models write it, with an encoder's CLS / SEP as its BOS / EOS."""
    spec, config = _read(folder, "tokenizer.json"), _read(folder, "tokenizer_config.json")
    keys = tokenizer_keys(folder, vocab_size)
    tokens = keys["tokenizer.ggml.tokens"][0]
    stand_ins = {
        name: config[other] for name, other in _STAND_INS.items() if not config.get(name) and config.get(other)
    }
    if stand_ins:
        keys.update(special_token_keys(spec, {**config, **stand_ins}, tokens))
    ids = {token: index for index, token in enumerate(tokens)}
    for name, key in _SPECIAL_KEYS.items():
        token = config.get(name)
        if isinstance(token, str) and token in ids:
            keys[key] = (ids[token], "UINT32", None)
    return keys


VOCABULARIES: Dict[str, Callable[[Path, int], TokenizerKeys]] = {
    "WordPiece": wordpiece_keys,
    "Unigram": unigram_keys,
    "BPE": byte_level_keys,
}


def embedding_vocabulary_keys(folder: Path, vocab_size: int, checked: Sequence[str]) -> TokenizerKeys:
    """The keys for the tokenizer saved in `folder`, if its model type is one `checked` for the family."""
    kind = (_read(folder, "tokenizer.json").get("model") or {}).get("type")
    if kind not in checked or kind not in VOCABULARIES:
        raise UnsupportedModel(
            f"this family's embedding GGUF is written and checked with llama.cpp for {', '.join(checked)} "
            f"tokenizers, not {kind!r}"
        )
    return VOCABULARIES[kind](folder, vocab_size)
