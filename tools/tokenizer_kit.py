"""Real byte-level BPE fast tokenizers trained on the shared corpus, cached on disk so training happens once.

`build_tokenizer()` gives a small tokenizer (8,000 tokens at most); `build_heavy_tokenizer()` grows it to a
vocabulary the size of a modern LLM's (128,000 tokens, several MB when pickled), which is what a worker
pool has to ship to every process. `load_tokenizer(path)` reads a `tokenizer.json` or a folder holding one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tokenizers

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO_ROOT / "shared" / "corpus"
DEFAULT_CACHE_DIR = REPO_ROOT / "build" / "tokenizers"
SPECIAL_TOKENS = ("<|pad|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>")
# Part of every cache key, so changing how tokenizers are built never reuses a stale file.
RECIPE_VERSION = "1"
HEAVY_VOCAB_SIZE = 128_000
HEAVY_BASE_VOCAB_SIZE = 8_000
# Longer synthetic tokens would never match real text; this keeps them word-sized like real vocabularies.
HEAVY_MAX_TOKEN_CHARS = 24
WORD_START = "\u0120"  # the byte-level alphabet's stand-in for a leading space


# ---- corpus (I/O) ----


def corpus_paths(corpus_dir: Path = CORPUS_DIR) -> list[Path]:
    return sorted(corpus_dir.glob("*.txt"))


def read_corpus_texts(corpus_dir: Path = CORPUS_DIR) -> list[str]:
    return [path.read_text(encoding="utf-8") for path in corpus_paths(corpus_dir)]


def corpus_digest(corpus_dir: Path = CORPUS_DIR) -> str:
    """A short hash of the corpus files' names and bytes plus the recipe version."""
    digest = hashlib.sha256(RECIPE_VERSION.encode())
    for path in corpus_paths(corpus_dir):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# ---- cache (I/O) ----


def cache_path(cache_dir: Path | None, stem: str) -> Path:
    return (DEFAULT_CACHE_DIR if cache_dir is None else Path(cache_dir)) / f"{stem}.json"


def read_cached_tokenizer(path: Path) -> tokenizers.Tokenizer | None:
    """The cached tokenizer, or None when the file is missing or unreadable (then it is rebuilt)."""
    from tokenizers import Tokenizer

    if not path.is_file():
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception:
        return None


def write_cache_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so parallel test workers never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# ---- training and growing (pure apart from the tokenizers library) ----


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int) -> tokenizers.Tokenizer:
    """Train a byte-level BPE (GPT-2 style pre-tokenization) with the chat special tokens as ids 0-4."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    return tokenizer


def grow_bpe_state(state: dict[str, Any], vocab_size: int, *, seed: int) -> dict[str, Any]:
    """Extend a serialized BPE model with seeded synthetic merges until the vocabulary reaches `vocab_size`.

    Each new token joins an existing token with an existing word-internal piece, and its merge is ranked
    after every trained merge, so the result is still a valid BPE model that round-trips any text.
    """
    model = state["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges: list[Any] = list(model["merges"])
    merges_as_strings = bool(merges) and isinstance(merges[0], str)
    special = set(SPECIAL_TOKENS)
    lefts = sorted(token for token in vocab if token not in special)
    rights = sorted(token for token in lefts if not token.startswith(WORD_START))
    next_id = max(vocab.values()) + 1
    rng = random.Random(seed)
    while len(vocab) < vocab_size:
        left = lefts[int(rng.random() * len(lefts))]
        right = rights[int(rng.random() * len(rights))]
        merged = left + right
        if merged in vocab or len(merged) > HEAVY_MAX_TOKEN_CHARS:
            continue
        vocab[merged] = next_id
        next_id += 1
        merges.append(f"{left} {right}" if merges_as_strings else [left, right])
        lefts.append(merged)
        if not merged.startswith(WORD_START):
            rights.append(merged)
    return {**state, "model": {**model, "vocab": vocab, "merges": merges}}


# ---- public builders ----


def build_tokenizer(vocab_size: int = 8000, *, cache_dir: Path | None = None) -> tokenizers.Tokenizer:
    """A byte-level BPE trained on the corpus, loaded from `cache_dir` when an identical one was built before."""
    path = cache_path(cache_dir, f"bpe-{vocab_size}-{corpus_digest()}")
    cached = read_cached_tokenizer(path)
    if cached is not None:
        return cached
    tokenizer = train_bpe_tokenizer(read_corpus_texts(), vocab_size)
    write_cache_atomically(path, tokenizer.to_str())
    return tokenizer


def build_heavy_tokenizer(
    vocab_size: int = HEAVY_VOCAB_SIZE, *, seed: int = 0, cache_dir: Path | None = None
) -> tokenizers.Tokenizer:
    """A tokenizer with a large vocabulary: the corpus BPE grown with deterministic synthetic merges."""
    from tokenizers import Tokenizer

    path = cache_path(cache_dir, f"heavy-bpe-{vocab_size}-seed{seed}-{corpus_digest()}")
    cached = read_cached_tokenizer(path)
    if cached is not None:
        return cached
    base = build_tokenizer(HEAVY_BASE_VOCAB_SIZE, cache_dir=cache_dir)
    grown = grow_bpe_state(json.loads(base.to_str()), vocab_size, seed=seed)
    text = json.dumps(grown, ensure_ascii=False)
    tokenizer = Tokenizer.from_str(text)
    write_cache_atomically(path, text)
    return tokenizer


def load_tokenizer(path: str | Path) -> tokenizers.Tokenizer:
    """Load a fast tokenizer from a `tokenizer.json` file or from a folder that holds one."""
    from tokenizers import Tokenizer

    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no tokenizer file at {file}")
    return Tokenizer.from_file(str(file))
