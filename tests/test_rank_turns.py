"""Ranks on one host: inside a main-first block the local main rank gets the host; filters name one cache.

The host is faked through the OS's answers (tools/kits/fake_host.py); the filter runs on real `datasets`.
"""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from tools.kits.fake_host import HostProfile, apply_host
from unsloth.trl_patch import map_scope, ranks
from unsloth_zoo import dataset_num_proc as zoo_policy


def _host(monkeypatch, tmp_path, *, cpus=8, ranks_on_host=2, memory_gb=64.0):
    env = {"LOCAL_WORLD_SIZE": str(ranks_on_host)}
    apply_host(monkeypatch, HostProfile(cpu_count=cpus, available_memory_gb=memory_gb, env=env), tmp_path, [zoo_policy])


@pytest.mark.parametrize(
    "ranks_on_host, main_first, expected",
    [
        (2, None, 2),  # 8 CPUs shared by 2 ranks: 4 each, half of that
        (2, "main", 4),  # the others wait: all 8 CPUs are the main rank's
        (4, "rest", 2),  # 3 ranks map at once: 8 // 3 = 2 CPUs each, at least 2 workers
        (8, "rest", None),  # 7 ranks at once: 1 CPU each, no room for workers
        (1, "main", 4),  # a lone rank is unchanged
    ],
)
def test_main_first_shares_the_cpus_among_the_ranks_that_run(
    monkeypatch, tmp_path, ranks_on_host, main_first, expected
):
    _host(monkeypatch, tmp_path, ranks_on_host=ranks_on_host)
    assert zoo_policy.get_dataset_num_proc(None, main_first=main_first) == expected


def test_main_first_shares_memory_among_the_ranks_that_run(monkeypatch, tmp_path):
    # 8 GiB for 4 ranks is 2 GiB a rank, 1 worker's budget: in-process; alone, 8 GiB covers 4 workers.
    _host(monkeypatch, tmp_path, ranks_on_host=4, memory_gb=8.0)
    assert zoo_policy.get_dataset_num_proc(8) is None
    assert zoo_policy.get_dataset_num_proc(8, main_first="main") == 4


def test_explain_names_the_rule_that_applied(monkeypatch, tmp_path):
    _host(monkeypatch, tmp_path, ranks_on_host=4)
    main = zoo_policy.explain_dataset_num_proc(None, main_first="main").format_table()
    rest = zoo_policy.explain_dataset_num_proc(None, main_first="rest").format_table()
    plain = zoo_policy.explain_dataset_num_proc(None).format_table()
    assert "the local main rank maps first while the other 3 wait: 8 CPUs for this rank" in main
    assert "after the local main rank, 3 local ranks map at once: 2 CPUs for this rank" in rest
    assert "4 local ranks share the host: 2 CPUs for this rank" in plain


def test_an_unknown_turn_is_ignored_with_one_warning(monkeypatch, tmp_path, caplog):
    _host(monkeypatch, tmp_path)
    with caplog.at_level("WARNING"):
        assert zoo_policy.get_dataset_num_proc(None, main_first="first") == 2
        assert zoo_policy.get_dataset_num_proc(None, main_first="first") == 2
    assert [record.getMessage() for record in caplog.records] == [
        "Ignoring main_first='first': expected 'main' or 'rest'."
    ]


def test_the_cli_takes_the_turn(monkeypatch, tmp_path, capsys):
    _host(monkeypatch, tmp_path)
    assert zoo_policy.main(["--main-first", "main"]) == 0
    assert capsys.readouterr().out.startswith("num_proc          4")


@pytest.mark.parametrize(
    "processes, local_main, turn",
    [(1, True, None), (2, True, "main"), (2, False, "rest"), ("junk", True, None)],
)
def test_the_turn_read_off_a_partial_state(processes, local_main, turn):
    state = types.SimpleNamespace(num_processes=processes, is_local_main_process=local_main)
    assert ranks.turn_of(state) == turn


def test_outside_any_block_no_turn_is_known():
    assert ranks.main_first_turn() is None


class _PartialState:
    """Answers like accelerate's `PartialState` in a 2-process run; its block lets this process straight in."""

    def __init__(self, local_main):
        self.num_processes, self.is_local_main_process = 2, local_main

    @contextlib.contextmanager
    def local_main_process_first(self):
        yield


@pytest.fixture
def accelerate_state(monkeypatch):
    module = types.ModuleType(ranks.STATE_MODULE)
    module.PartialState = type("PartialState", (_PartialState,), {})
    monkeypatch.setitem(sys.modules, ranks.STATE_MODULE, module)
    assert ranks.watch_main_first()
    return module.PartialState


@pytest.mark.parametrize("local_main, expected", [(True, 4), (False, 4)])
def test_a_scope_map_is_sized_for_the_turn_it_runs_in(monkeypatch, tmp_path, accelerate_state, local_main, expected):
    _host(monkeypatch, tmp_path, ranks_on_host=2)  # either turn has the 8 CPUs to itself
    scope = map_scope.Scope(None)
    before = map_scope.map_num_proc(scope, 80_000, (len, None))
    with accelerate_state(local_main).local_main_process_first():
        inside = map_scope.map_num_proc(scope, 80_000, (len, None))
    after = map_scope.map_num_proc(scope, 80_000, (len, None))
    assert (before, inside, after) == (2, expected, 2)


def test_watching_twice_wraps_once(accelerate_state):
    wrapped = accelerate_state.local_main_process_first
    assert ranks.watch_main_first()
    assert accelerate_state.local_main_process_first is wrapped


def _keep_even(example):
    return example["value"] % 2 == 0


@pytest.mark.parametrize("in_scope", [True, False])
def test_a_filter_in_a_scope_has_one_fingerprint_whatever_num_proc_it_is_given(in_scope):
    import datasets

    with map_scope.sized_maps(None):
        pass  # installs the hooks; outside a scope they pass every call through
    dataset = datasets.Dataset.from_dict({"value": list(range(40))})
    with map_scope.sized_maps(None) if in_scope else contextlib.nullcontext():
        one = dataset.filter(_keep_even, num_proc=1)
        two = dataset.filter(_keep_even, num_proc=2)
    assert one["value"] == two["value"] == list(range(0, 40, 2))
    assert (one._fingerprint == two._fingerprint) is in_scope
