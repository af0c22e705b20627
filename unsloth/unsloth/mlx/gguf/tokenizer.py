# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The GGUF tokenizer keys for a Hugging Face tokenizer folder: vocabulary, special tokens and chat template.

Two kinds are written: byte-level BPE as llama.cpp's `gpt2` model, with the pre-tokenizer name whose regex
llama.cpp must apply (told apart by the regex in `tokenizer.json`), and SentencePiece-style BPE with byte fallback
as llama.cpp's `llama` model, scored so that llama.cpp's bigram merging picks the merges in the BPE's order.
Anything else is refused by name, since a wrong pre-tokenizer makes llama.cpp read other tokens than the model saw.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# GGUF key: (value, GGUFValueType name, array item type name or None); gguf is imported by the writer only.
TokenizerKeys = Dict[str, Tuple[Any, str, Optional[str]]]
# llama.cpp's token types (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# Split regexes of the byte-level BPE families, and the pre-tokenizer name llama.cpp gives each.
LLAMA3_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen 3.5's: Qwen 2's with combining marks (\p{M}) kept inside words.
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# o200k's splitting (gpt-oss, Phi-4-mini): case changes split words, and `/` joins a run of punctuation.
GPT4O_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Granite 4.0 and LFM2 split as Llama 3 does (llama.cpp's `dbrx` and `lfm2` apply the same regex as `llama-bpe`).
PRE_TOKENIZER_NAMES = {LLAMA3_REGEX: "llama-bpe", QWEN2_REGEX: "qwen2", QWEN35_REGEX: "qwen35", GPT4O_REGEX: "gpt-4o"}
_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
_SPECIAL_ROLES = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token", "padding": "pad_token"}


class UnsupportedTokenizer(ValueError):
    """The tokenizer is of a kind this converter does not write."""


def _pieces(spec: Any) -> List[dict]:
    """A pre-tokenizer, normalizer or post-processor as its flat list of parts."""
    if not isinstance(spec, dict):
        return []
    if spec.get("type") == "Sequence":
        parts = spec.get("pretokenizers") or spec.get("normalizers") or spec.get("processors") or []
        return [piece for part in parts for piece in _pieces(part)]
    return [spec]


def byte_level_pre_name(pre_tokenizer: Any) -> str:
    """llama.cpp's pre-tokenizer name for a byte-level BPE's `pre_tokenizer`; UnsupportedTokenizer when unknown."""
    pieces = _pieces(pre_tokenizer)
    kinds = [piece.get("type") for piece in pieces]
    if kinds == ["ByteLevel"] and pieces[0].get("use_regex", True):
        return "gpt-2"
    splits = [piece for piece in pieces if piece.get("type") == "Split"]
    if len(splits) == 1 and "ByteLevel" in kinds:
        pattern = (splits[0].get("pattern") or {}).get("Regex")
        if pattern in PRE_TOKENIZER_NAMES:
            return PRE_TOKENIZER_NAMES[pattern]
    raise UnsupportedTokenizer(
        f"the byte-level BPE pre-tokenizer {json.dumps(pre_tokenizer)[:200]} is not one llama.cpp is known to "
        "apply (known: GPT-2's, Llama 3's, Qwen 2's, Qwen 3.5's and o200k's splitting)"
    )


def _is_sentencepiece_style(spec: dict) -> bool:
    model = spec.get("model") or {}
    return model.get("type") == "BPE" and bool(model.get("byte_fallback"))


def _adds_space_prefix(spec: dict) -> bool:
    """Whether the text gets a leading `▁` before tokenizing (llama.cpp's add_space_prefix)."""
    for piece in _pieces(spec.get("pre_tokenizer")):
        if piece.get("type") == "Metaspace":
            return piece.get("prepend_scheme", "always") != "never" and piece.get("add_prefix_space", True)
    return any(piece.get("type") == "Prepend" for piece in _pieces(spec.get("normalizer")))


def _base_tables(spec: dict, vocab_size: int) -> Tuple[List[str], List[int]]:
    """Tokens and types by id; rows no token uses (vocabularies padded to a round size) get placeholders."""
    tokens = [f"[PAD{index}]" for index in range(vocab_size)]
    types = [UNUSED] * vocab_size
    for token, index in spec["model"]["vocab"].items():
        if index < vocab_size:
            tokens[index], types[index] = token, NORMAL
    for added in spec.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    return tokens, types


def vocabulary_keys(spec: dict, vocab_size: int) -> TokenizerKeys:
    """The tokenizer.ggml vocabulary keys for a parsed `tokenizer.json`, sized to the embedding's rows."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise UnsupportedTokenizer(f"a {model.get('type')!r} tokenizer model cannot be written to GGUF here (BPE only)")
    tokens, types = _base_tables(spec, vocab_size)
    if _is_sentencepiece_style(spec):
        unknown = model.get("unk_token")
        for index, token in enumerate(tokens):
            if types[index] == NORMAL and _BYTE_TOKEN.match(token):
                types[index] = BYTE
            elif token == unknown:
                types[index] = UNKNOWN
        # llama.cpp merges the adjacent pair whose joined token scores highest; later ids came from later merges.
        scores = [0.0 if kind != NORMAL else -float(index) for index, kind in enumerate(types)]
        return {
            "tokenizer.ggml.model": ("llama", "STRING", None),
            "tokenizer.ggml.tokens": (tokens, "ARRAY", "STRING"),
            "tokenizer.ggml.scores": (scores, "ARRAY", "FLOAT32"),
            "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
            "tokenizer.ggml.add_space_prefix": (_adds_space_prefix(spec), "BOOL", None),
        }
    pieces = [piece.get("type") for piece in _pieces(spec.get("pre_tokenizer"))]
    if "ByteLevel" not in pieces:
        raise UnsupportedTokenizer("a BPE tokenizer that is neither byte-level nor byte-fallback cannot be written")
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges", [])]
    return {
        "tokenizer.ggml.model": ("gpt2", "STRING", None),
        "tokenizer.ggml.pre": (byte_level_pre_name(spec.get("pre_tokenizer")), "STRING", None),
        "tokenizer.ggml.tokens": (tokens, "ARRAY", "STRING"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
        "tokenizer.ggml.merges": (merges, "ARRAY", "STRING"),
    }


def _token_text(value: Any) -> Optional[str]:
    return value.get("content") if isinstance(value, dict) else value


def _adds_token(spec: dict, token: Optional[str], single: bool = True) -> bool:
    """Whether the post-processor puts `token` first (single=True) or last into every encoded text."""
    template = [piece for piece in _pieces(spec.get("post_processor")) if piece.get("type") == "TemplateProcessing"]
    if token is None or not template:
        return False
    items = template[0].get("single") or []
    if not items:
        return False
    return (items[0 if single else -1].get("SpecialToken") or {}).get("id") == token


def special_token_keys(spec: dict, config: dict, tokens: List[str]) -> TokenizerKeys:
    """Special token ids, whether BOS / EOS are added, and the chat template, from the tokenizer's files."""
    ids = {token: index for index, token in enumerate(tokens)}
    keys: TokenizerKeys = {}
    for role, name in _SPECIAL_ROLES.items():
        token = _token_text(config.get(name))
        if token is not None and token in ids:
            keys[f"tokenizer.ggml.{role}_token_id"] = (ids[token], "UINT32", None)
    bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
    keys["tokenizer.ggml.add_bos_token"] = (_adds_token(spec, bos), "BOOL", None)
    keys["tokenizer.ggml.add_eos_token"] = (_adds_token(spec, eos, single=False), "BOOL", None)
    return keys


def read_chat_template(folder: Path, config: dict) -> Optional[str]:
    """The chat template: transformers 5 saves it beside the config as `chat_template.jinja`, older ones inside."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    template = config.get("chat_template")
    return template if isinstance(template, str) else None


def tokenizer_keys(folder: Path, vocab_size: int) -> TokenizerKeys:
    """Every tokenizer key for the tokenizer saved in `folder` (tokenizer.json and tokenizer_config.json)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise UnsupportedTokenizer(f"GGUF export needs a fast tokenizer's tokenizer.json, and {path} is missing")
    spec = json.loads(path.read_text(encoding="utf-8"))
    config_path = Path(folder) / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    keys = vocabulary_keys(spec, vocab_size)
    keys.update(special_token_keys(spec, config, keys["tokenizer.ggml.tokens"][0]))
    template = read_chat_template(Path(folder), config)
    if template:
        keys["tokenizer.chat_template"] = (template, "STRING", None)
    return keys
