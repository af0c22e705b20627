"""map_failure_diagnostics against real worker deaths: real pools, real signals."""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path

import datasets
import pytest

from unsloth_zoo import dataset_num_proc as policy

ROWS = 400


@pytest.fixture(autouse=True)
def _quiet_real_maps(monkeypatch, tmp_path):
    datasets.disable_progress_bars()
    monkeypatch.delenv(policy.NUM_PROC_ENV_VAR, raising=False)
    # Host-wide counters move with other processes; the tests give the policy a private, still one.
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 1\noom_kill 3\n")
    monkeypatch.setattr(policy, "PROC_VMSTAT", str(vmstat))
    yield
    datasets.enable_progress_bars()


def _dataset() -> datasets.Dataset:
    return datasets.Dataset.from_dict({"x": list(range(ROWS))})


class _DieOnRow:
    """A batched map function whose worker sends itself `signum` when it reaches one row."""

    def __init__(self, signum: int, row: int = 300, oom_events: Path | None = None) -> None:
        self.signum, self.row, self.oom_events = signum, row, oom_events

    def __call__(self, batch: dict) -> dict:
        if self.row in batch["x"]:
            if self.oom_events is not None:
                self.oom_events.write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
            faulthandler.disable()  # pytest's handler, inherited by the fork, would print the crash
            os.kill(os.getpid(), self.signum)
        return batch


def _map_with_diagnostics(function, num_proc=2):
    with policy.map_failure_diagnostics(num_proc):
        return _dataset().map(function, batched=True, batch_size=10, num_proc=num_proc, load_from_cache_file=False)


@pytest.mark.parametrize("signum, name", [(signal.SIGKILL, "SIGKILL"), (signal.SIGSEGV, "SIGSEGV")])
def test_a_worker_killed_by_a_signal_is_named(signum, name):
    with pytest.raises(RuntimeError) as caught:
        _map_with_diagnostics(_DieOnRow(signum))
    message = str(caught.value)
    assert f"killed by {name} (exit code -{int(signum)})" in message
    assert "2 worker process(es)" in message and "'fork'" in message
    assert f"{policy.NUM_PROC_ENV_VAR}=0" in message and "no worker pool" in message
    assert f"{policy.NUM_PROC_ENV_VAR}=<n>" in message
    assert "abruptly died" in str(caught.value.__cause__)


def test_an_oom_kill_in_this_cgroup_is_named(monkeypatch, tmp_path):
    # A cgroup v2 tree whose oom_kill counter the dying worker raises, as the kernel would.
    root = tmp_path / "cg"
    job = root / "job"
    job.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    events = job / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/job\n")
    monkeypatch.setattr(policy, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(proc))
    with pytest.raises(RuntimeError) as caught:
        _map_with_diagnostics(_DieOnRow(signal.SIGKILL, oom_events=events))
    message = str(caught.value)
    assert "killed by SIGKILL" in message
    assert f"OOM killer fired during the map (oom_kill +1 in {events})" in message


def test_a_kill_without_oom_says_the_oom_killer_did_not_fire():
    with pytest.raises(RuntimeError) as caught:
        _map_with_diagnostics(_DieOnRow(signal.SIGKILL))
    assert "OOM killer did not fire" in str(caught.value)


def test_unobservable_cause_is_said_not_guessed(monkeypatch, tmp_path):
    monkeypatch.setattr(policy, "PROC_SELF_CGROUP", str(tmp_path / "none"))
    monkeypatch.setattr(policy, "PROC_VMSTAT", str(tmp_path / "none"))
    original = RuntimeError(
        "One of the subprocesses has abruptly died during map operation.To debug the error, disable multiprocessing."
    )
    with pytest.raises(RuntimeError) as caught:
        with policy.map_failure_diagnostics(4):
            raise original
    assert "could not be observed" in str(caught.value)
    assert "OOM killer fired" not in str(caught.value) and "killed by" not in str(caught.value)
    assert caught.value.__cause__ is original


def test_unrelated_errors_pass_through_as_the_same_objects():
    unrelated = RuntimeError("CUDA out of memory")
    same_text = ValueError("One of the subprocesses has abruptly died during map operation")
    for error in (unrelated, same_text):
        with pytest.raises(type(error)) as caught:
            with policy.map_failure_diagnostics(2):
                raise error
        assert caught.value is error


def test_success_is_transparent_and_the_pool_is_left_as_found():
    import multiprocess.pool

    before = multiprocess.pool.Pool.__dict__["_join_exited_workers"]
    result = _map_with_diagnostics(lambda batch: {"y": [value * 2 for value in batch["x"]]})
    assert result["y"] == [value * 2 for value in range(ROWS)]
    assert multiprocess.pool.Pool.__dict__["_join_exited_workers"] is before
