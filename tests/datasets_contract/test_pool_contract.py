"""Which `num_proc` values build a `multiprocess` pool on the installed datasets release, observed on real maps."""

from __future__ import annotations

import os

import pytest

from tools.kits.pool_spy import spy_pools

from .versions import at_least, release_tuple

POOL_OF_ONE_SINCE = (4, 1, 0)

pytestmark = pytest.mark.slow


def _map(corpus, tokenize, num_proc):
    return corpus.map(tokenize, batched=True, batch_size=50, num_proc=num_proc, load_from_cache_file=False)


def _assert_tokenized(result, texts, vocabulary) -> None:
    # Computed from the word list alone, so it checks the map's output without trusting the tokenizer.
    assert result["input_ids"] == [[vocabulary[word] for word in text.split()] for text in texts]


def test_version_parser_orders_releases() -> None:
    assert release_tuple("4.1.0") == (4, 1, 0)
    assert release_tuple("4.1.0rc1") == (4, 1, 0)
    assert release_tuple("5.2") == (5, 2)
    assert at_least("4.1", (4, 1, 0))
    assert at_least("4.10.0", (4, 1, 0))
    assert not at_least("4.0.9", (4, 1, 0))
    assert not at_least("3.6.0", (4, 1, 0))


def test_spy_sees_a_direct_pool_and_restores_init() -> None:
    import multiprocessing.pool

    from multiprocess import pool as mp_pool

    before = (mp_pool.Pool.__init__, multiprocessing.pool.Pool.__init__)
    with spy_pools() as log:
        with mp_pool.Pool(processes=2) as pool:
            assert sorted(pool.map(abs, [-1, -2, -3])) == [1, 2, 3]
        with multiprocessing.pool.ThreadPool(3):
            pass
    assert log.process_pools() == [2]
    assert [call.kind for call in log] == ["multiprocess.pool.Pool", "multiprocessing.pool.ThreadPool"]
    assert (mp_pool.Pool.__init__, multiprocessing.pool.Pool.__init__) == before


def test_num_proc_none_builds_no_pool(corpus, tokenize, texts, vocabulary) -> None:
    with spy_pools() as log:
        result = _map(corpus, tokenize, None)
    assert log.process_pools() == []
    assert set(result["pid"]) == {os.getpid()}
    _assert_tokenized(result, texts, vocabulary)


def test_num_proc_one_builds_a_pool_only_from_4_1(corpus, tokenize, texts, vocabulary, datasets_version) -> None:
    with spy_pools() as log:
        result = _map(corpus, tokenize, 1)
    if at_least(datasets_version, POOL_OF_ONE_SINCE):
        assert log.process_pools() == [1]
        assert len(set(result["pid"])) == 1 and os.getpid() not in result["pid"]
    else:
        assert log.process_pools() == []
        assert set(result["pid"]) == {os.getpid()}
    _assert_tokenized(result, texts, vocabulary)


def test_num_proc_zero(corpus, tokenize, texts, vocabulary, datasets_version) -> None:
    """Before 4.1 zero is rejected; from 4.1 on it is treated as None and maps in the main process."""
    with spy_pools() as log:
        if at_least(datasets_version, POOL_OF_ONE_SINCE):
            result = _map(corpus, tokenize, 0)
            assert set(result["pid"]) == {os.getpid()}
            _assert_tokenized(result, texts, vocabulary)
        else:
            with pytest.raises(ValueError, match=r"^num_proc must be an integer > 0\.$"):
                _map(corpus, tokenize, 0)
    assert log.process_pools() == []


def test_negative_num_proc_is_rejected(corpus, tokenize, datasets_version) -> None:
    message = r"must be >= 0 or None" if at_least(datasets_version, POOL_OF_ONE_SINCE) else r"must be an integer > 0"
    with spy_pools() as log, pytest.raises(ValueError, match=message):
        _map(corpus, tokenize, -1)
    assert log.process_pools() == []


def test_num_proc_two_builds_a_pool_of_two(corpus, tokenize, texts, vocabulary) -> None:
    with spy_pools() as log:
        result = _map(corpus, tokenize, 2)
    assert log.process_pools() == [2]
    # Two shards go to the pool's task queue, so one or both workers may run them, never the parent.
    assert 1 <= len(set(result["pid"])) <= 2 and os.getpid() not in result["pid"]
    _assert_tokenized(result, texts, vocabulary)


def test_num_proc_above_row_count_is_clamped_to_rows(tokenize, datasets_version) -> None:
    """A one-row dataset clamps num_proc=2 to 1, which from 4.1 on is itself a pool of one worker."""
    import datasets

    single = datasets.Dataset.from_dict({"text": ["the policy decides"]})
    with spy_pools() as log:
        result = _map(single, tokenize, 2)
    assert log.process_pools() == ([1] if at_least(datasets_version, POOL_OF_ONE_SINCE) else [])
    assert len(result["input_ids"][0]) == 3
