"""Real byte-level BPE fast tokenizers trained on the shared corpus, cached on disk so training happens once.

`build_tokenizer()` gives a small tokenizer (8,000 tokens at most); `build_heavy_tokenizer()` grows it to a
vocabulary the size of a modern LLM's (128,000 tokens, several MB when pickled), which is what a worker
pool has to ship to every process. `load_tokenizer(path)` reads a `tokenizer.json` or a folder holding one.

The cache lives outside the checkout, in `$UNSLOTH_TOKENIZER_CACHE` if set, else
`$XDG_CACHE_HOME/unsloth-mlx/tokenizers` (`~/.cache/...` without it); each file is named by its recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tokenizers

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT / "shared" / "corpus"
CACHE_VARIABLE = "UNSLOTH_TOKENIZER_CACHE"
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


def default_cache_dir(environ: Mapping[str, str], home: Path) -> Path:
    """`$UNSLOTH_TOKENIZER_CACHE`, else the user's cache folder: never the checkout, which tests must leave alone."""
    if environ.get(CACHE_VARIABLE):
        return Path(environ[CACHE_VARIABLE])
    return Path(environ.get("XDG_CACHE_HOME") or home / ".cache") / "unsloth-mlx" / "tokenizers"


def cache_path(cache_dir: Path | None, stem: str) -> Path:
    folder = default_cache_dir(os.environ, Path.home()) if cache_dir is None else Path(cache_dir)
    return folder / f"{stem}.json"


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


# The splitting regexes of Llama 3's and Qwen 2's byte-level BPE tokenizers (Qwen 2 splits digits one by one).
SPLIT_REGEXES = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
# Byte-level BPE kinds ("gpt2", "llama3", "qwen2") and the SentencePiece-style kind Gemma, Mistral and Phi-3 use.
TOKENIZER_KINDS = ("gpt2", *SPLIT_REGEXES, "sentencepiece")
SENTENCEPIECE_UNKNOWN = "<unk>"
WORD_MARK = "\u2581"  # SentencePiece's stand-in for a space


def _byte_level_pre_tokenizer(kind: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    if kind == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    split = pre_tokenizers.Split(Regex(SPLIT_REGEXES[kind]), behavior="isolated")
    return pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_sentencepiece_style(texts: Iterable[str], vocab_size: int) -> tokenizers.Tokenizer:
    """A BPE over `▁`-marked words with byte fallback, laid out as SentencePiece vocabularies are.

    Ids: the chat special tokens, `<unk>`, the 256 byte tokens `<0x00>`..`<0xFF>`, then the trained pieces in
    merge order. Every section of text (also after a special token) gets a leading `▁`, as llama.cpp's
    SentencePiece tokenizer adds one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = [*SPECIAL_TOKENS, SENTENCEPIECE_UNKNOWN]
    byte_tokens = [f"<0x{value:02X}>" for value in range(256)]
    metaspace = pre_tokenizers.Metaspace(replacement=WORD_MARK, prepend_scheme="always", split=True)
    trainer_model = Tokenizer(models.BPE())
    trainer_model.pre_tokenizer = metaspace
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(specials) - len(byte_tokens), special_tokens=[], show_progress=False
    )
    trainer_model.train_from_iterator(list(texts), trainer=trainer)
    trained = json.loads(trainer_model.to_str())["model"]
    pieces = sorted(trained["vocab"], key=trained["vocab"].__getitem__)
    vocab = {token: index for index, token in enumerate([*specials, *byte_tokens, *pieces])}
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[
                tuple(merge) if not isinstance(merge, str) else tuple(merge.split(" ")) for merge in trained["merges"]
            ],
            unk_token=SENTENCEPIECE_UNKNOWN,
            byte_fallback=True,
            fuse_unk=True,
        )
    )
    tokenizer.add_special_tokens(specials)
    tokenizer.pre_tokenizer = metaspace
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(WORD_MARK, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tokenizer


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, kind: str = "gpt2") -> tokenizers.Tokenizer:
    """Train a BPE of `kind` (see TOKENIZER_KINDS) with the chat special tokens as ids 0-4."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if kind == "sentencepiece":
        return train_sentencepiece_style(texts, vocab_size)
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; known: {', '.join(TOKENIZER_KINDS)}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = _byte_level_pre_tokenizer(kind)
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


def build_tokenizer(
    vocab_size: int = 8000, *, cache_dir: Path | None = None, kind: str = "gpt2"
) -> tokenizers.Tokenizer:
    """A BPE of `kind` trained on the corpus, loaded from `cache_dir` when an identical one was built before."""
    stem = "bpe" if kind == "gpt2" else f"bpe-{kind}"
    path = cache_path(cache_dir, f"{stem}-{vocab_size}-{corpus_digest()}")
    cached = read_cached_tokenizer(path)
    if cached is not None:
        return cached
    tokenizer = train_bpe_tokenizer(read_corpus_texts(), vocab_size, kind)
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
    try:
        return Tokenizer.from_file(str(file))
    except Exception as error:  # tokenizers raises a bare Exception for a file it cannot parse
        raise ValueError(f"{file} is not a tokenizer file that tokenizers can read ({error})") from None
