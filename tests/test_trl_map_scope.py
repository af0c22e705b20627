"""The TRL map scope's weight (the trainer's processing class): pickled at most once per preparation."""

from __future__ import annotations

import pytest

from tools.kits.fake_host import HostProfile, apply_host
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
