"""The policy's warnings: one per distinct decision per process, and advice the escape hatch accepts."""

from __future__ import annotations

import itertools
import logging

import pytest

from tools.kits.fake_host import HostProfile, apply_host
from unsloth_zoo import dataset_num_proc as policy

LOGGER = "unsloth_zoo.dataset_num_proc"


@pytest.fixture
def host(monkeypatch, tmp_path):
    counter = itertools.count()

    def apply(**fields) -> None:
        apply_host(monkeypatch, HostProfile(**fields), tmp_path / f"host{next(counter)}", [policy])

    return apply


def warnings_logged(caplog) -> list:
    return [
        record.getMessage() for record in caplog.records if record.name == LOGGER and record.levelno == logging.WARNING
    ]


def test_in_process_for_memory_warns_once_while_the_free_memory_figure_moves(host, caplog):
    for free_gib in (3.5, 3.4, 3.3, 3.2, 3.1):  # five maps of one run, each reading a little less free memory
        host(cpu_count=64, available_memory_gb=free_gib)
        assert policy.get_dataset_num_proc(8) is None
    messages = warnings_logged(caplog)
    assert len(messages) == 1 and "3.5 GiB" in messages[0]
    # The figure of each call stays in its own record.
    assert "3.1 GiB" in policy.explain_dataset_num_proc(8).format_table()


def test_a_clamp_warns_once_per_outcome_not_per_figure(host, caplog):
    for free_gib in (20.0, 20.6, 21.9):  # 10 workers each time
        host(cpu_count=64, available_memory_gb=free_gib)
        assert policy.get_dataset_num_proc(64) == 10
    host(cpu_count=64, available_memory_gb=12.0)  # a different outcome: 6 workers
    assert policy.get_dataset_num_proc(64) == 6
    messages = warnings_logged(caplog)
    assert len(messages) == 2 and "Using 10 " in messages[0] and "Using 6 " in messages[1]


def test_reset_lets_a_decision_warn_again(host, caplog):
    host(cpu_count=64, available_memory_gb=3.5)
    policy.get_dataset_num_proc()
    policy.reset_warning_state()
    host(cpu_count=64, available_memory_gb=3.4)
    policy.get_dataset_num_proc()
    assert len(warnings_logged(caplog)) == 2


@pytest.mark.parametrize("requested", [10**30, 2**63 - 1, 10**18])
def test_forcing_advice_names_a_value_the_variable_accepts(host, caplog, monkeypatch, requested):
    host(cpu_count=64, available_memory_gb=20)
    policy.get_dataset_num_proc(requested)
    (message,) = warnings_logged(caplog)
    advised = message.split(f"{policy.NUM_PROC_ENV_VAR}=")[1].split()[0]
    monkeypatch.setenv(policy.NUM_PROC_ENV_VAR, advised)
    assert policy.environment_override() == (True, int(advised))
    assert f"force {advised} workers" in message


def test_forcing_advice_keeps_a_small_request_as_it_is(host, caplog):
    host(cpu_count=64, available_memory_gb=20)
    policy.get_dataset_num_proc(64)
    assert f"{policy.NUM_PROC_ENV_VAR}=64 to force 64 workers" in warnings_logged(caplog)[0]


def test_the_rows_step_says_how_many_rows_each_worker_gets(host):
    # It read "8000 rows give 5000 rows to at most 1 workers" when the rows kept the map in-process.
    host(cpu_count=64, available_memory_gb=512)
    alone = policy.explain_dataset_num_proc(rows=8000).steps[-1].reason
    assert alone == "8000 rows cannot give 2 workers 5000 rows each"
    shared = policy.explain_dataset_num_proc(rows=16000).steps[-1].reason
    assert shared == "16000 rows give 3 workers 5000 rows each"
