"""The TRL map scope's weight (the trainer's processing class): pickled at most once per preparation."""

from __future__ import annotations

import sys

import datasets
import multiprocess  # the real module, imported before the fake host replaces it
import pytest

from tools.kits.fake_host import HostProfile, apply_host
from tools.kits.pool_spy import spy_pools
from unsloth.trl_patch import map_scope
from unsloth_zoo import dataset_num_proc as zoo_policy

MIB = 2**20
LIGHT_MAP = (len, None)  # what a cheap map ships its workers: a builtin, no fn_kwargs


@pytest.fixture(autouse=True)
def _big_host(monkeypatch, tmp_path):
    apply_host(monkeypatch, HostProfile(cpu_count=64, available_memory_gb=512), tmp_path, [zoo_policy])


class _Weight:
    """Pickles to `size` bytes, or raises when `size` is None; counts every attempt."""

    def __init__(self, size):
        self.size, self.attempts = size, 0

    def __reduce__(self):
        self.attempts += 1
        if self.size is None:
            raise RuntimeError("cannot be pickled")
        return (bytes, (b"x" * self.size,))


def test_a_heavy_weight_keeps_every_map_in_process_and_is_pickled_once():
    weight = _Weight(7 * MIB)
    scope = map_scope.Scope(None, weight)
    assert [map_scope.map_num_proc(scope, 16_000, LIGHT_MAP) for _ in range(4)] == [None] * 4
    assert weight.attempts == 1


def test_a_weight_that_cannot_be_pickled_is_tried_once_and_then_ignored():
    weight = _Weight(None)
    scope = map_scope.Scope(None, weight)
    assert [map_scope.map_num_proc(scope, 16_000, LIGHT_MAP) for _ in range(4)] == [3] * 4
    assert weight.attempts == 1


def test_small_maps_leave_the_weight_unpickled_until_one_has_room_for_workers():
    weight = _Weight(7 * MIB)
    scope = map_scope.Scope(None, weight)
    assert map_scope.map_num_proc(scope, 8, LIGHT_MAP) is None and weight.attempts == 0
    assert map_scope.map_num_proc(scope, 16_000, LIGHT_MAP) is None and weight.attempts == 1


def test_an_explicit_request_never_pickles_the_weight():
    weight = _Weight(7 * MIB)
    assert map_scope.map_num_proc(map_scope.Scope(4, weight), 16_000, LIGHT_MAP) == 4
    assert weight.attempts == 0


def test_a_batched_map_asks_more_rows_of_each_worker():
    # 16,000 // 12,500 = 1 batched worker; 16,000 // 5,000 = 3 per-row workers.
    assert map_scope.map_num_proc(map_scope.Scope(None), 16_000, LIGHT_MAP, batched=True) is None
    assert map_scope.map_num_proc(map_scope.Scope(None), 16_000, LIGHT_MAP, batched=False) == 3
    assert map_scope.map_num_proc(map_scope.Scope(None, _Weight(10)), 16_000, LIGHT_MAP, batched=True) is None


def _identity(row):
    return row


def _keep_even(row):
    return row["x"] % 2 == 0


def _keep_even_batch(batch):
    return [x % 2 == 0 for x in batch["x"]]


@pytest.fixture
def in_scope(monkeypatch):
    """Run `operation(rows)` on 16,000 real rows inside an auto scope; its result and the pools it built."""
    # The fake host's start-method module cannot build pools; the real one (fork, on Linux) can.
    monkeypatch.setitem(sys.modules, "multiprocess", multiprocess)

    def run(operation):
        rows = datasets.Dataset.from_dict({"x": list(range(16_000))})
        with spy_pools() as log, map_scope.sized_maps(None):
            result = operation(rows)
        return result, log.process_pools()

    return run


@pytest.mark.slow
@pytest.mark.parametrize("map_kwargs, pools", [({"batched": True}, []), ({"batched": False}, [3]), ({}, [3])])
def test_the_hook_reads_batched_from_the_call_or_datasets_default(in_scope, map_kwargs, pools):
    mapped, built = in_scope(lambda rows: rows.map(_identity, load_from_cache_file=False, **map_kwargs))
    assert (len(mapped), built) == (16_000, pools)


@pytest.mark.slow
@pytest.mark.parametrize(
    "predicate, filter_kwargs, pools", [(_keep_even, {}, [3]), (_keep_even_batch, {"batched": True}, [])]
)
def test_a_filter_is_sized_by_its_own_batched_not_its_inner_maps(in_scope, predicate, filter_kwargs, pools):
    # Dataset.filter runs its predicate through a batched map whatever the predicate is; a per-row predicate
    # runs Python once a row, so its map asks a per-row worker's 5,000 rows: 16,000 // 5,000 = 3.
    kept, built = in_scope(lambda rows: rows.filter(predicate, load_from_cache_file=False, **filter_kwargs))
    assert (len(kept), built) == (8_000, pools)
