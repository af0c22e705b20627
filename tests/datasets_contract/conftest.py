"""Fixtures for the datasets contract: a small real corpus, a real tokenizer closure, and no cache reuse."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Iterator

import pytest

WORDS = ["the", "policy", "decides", "how", "many", "workers", "tokenize", "each", "batch", "here"]
ROWS = 300

MapFunction = Callable[[dict[str, list[str]]], dict[str, list]]


@pytest.fixture(scope="session")
def datasets_version() -> str:
    return importlib.metadata.version("datasets")


@pytest.fixture(scope="package", autouse=True)
def _no_cache_reuse() -> Iterator[None]:
    # Every map in this folder must really run, never be answered from an earlier run's cache file.
    import datasets

    datasets.disable_caching()
    yield
    datasets.enable_caching()


@pytest.fixture(scope="session")
def vocabulary() -> dict[str, int]:
    return {word: index for index, word in enumerate(WORDS)}


@pytest.fixture(scope="session")
def texts() -> list[str]:
    # Row i holds 1 + i % 7 words, so rows differ in length and content.
    return [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 7)) for i in range(ROWS)]


@pytest.fixture
def corpus(texts: list[str]):
    import datasets

    return datasets.Dataset.from_dict({"text": texts})


@pytest.fixture(scope="session")
def tokenize(vocabulary: dict[str, int]) -> MapFunction:
    """A batched map function closing over a real `tokenizers` tokenizer; it also reports which process ran it."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel(vocab=dict(vocabulary), unk_token="the"))
    tokenizer.pre_tokenizer = Whitespace()

    def tokenize_batch(batch: dict[str, list[str]]) -> dict[str, list]:
        encodings = tokenizer.encode_batch(batch["text"])
        return {"input_ids": [encoding.ids for encoding in encodings], "pid": [os.getpid()] * len(encodings)}

    return tokenize_batch
