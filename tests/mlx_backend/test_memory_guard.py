"""A run that will not fit stops before its first step with the settings that fit; a run that fits trains.

The limits are real: `mx.set_memory_limit` (which the guard reads back), a memory cgroup the run sits in (where this
machine lets a test make one), and a cgroup tree the policy's reader sees. Metal cannot exist here, so its budget is
checked through MLX's answers about the device.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from mlx_test_kit import EventRecorder

from tools.kits.fake_host import CgroupSpec, HostProfile, apply_host
from tools.oom_cgroup import can_create_memory_cgroup, memory_limited_cgroup

GIB = 2**30
MIB = 2**20
REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = REPO_ROOT / "tests" / "workloads" / "guard_cgroup.py"
# Long rows, so activations (not the tiny model's weights) dominate the peak.
LONG_TEXT = " ".join(f"word{i} is followed by word{i + 1}" for i in range(60))


@pytest.fixture
def memory_limit():
    """Set MLX's memory limit for one test and put the previous one back."""
    import mlx.core as mx

    previous = mx.get_memory_limit()
    yield mx.set_memory_limit
    mx.set_memory_limit(previous)


@pytest.fixture(autouse=True)
def guard_on(monkeypatch):
    monkeypatch.delenv("UNSLOTH_MLX_MEMORY_GUARD", raising=False)


def _trainer(load_tiny, config, recorder=None, **overrides):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    values = {"per_device_train_batch_size": 4, "max_steps": 2, "max_seq_length": 256, "mx_compile": False}
    args = config(**{**values, **overrides})
    rows = [{"text": f"{index} {LONG_TEXT}"} for index in range(8)]
    return MLXTrainer(model, tokenizer, rows, args=args, callbacks=[recorder] if recorder else None)


def _measure(load_tiny, config, memory_limit, **overrides):
    """The guard's own measurement of a run, read from the error a 1 MiB limit raises."""
    from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded

    memory_limit(MIB)
    with pytest.raises(MemoryBudgetExceeded) as raised:
        _trainer(load_tiny, config, **overrides).train()
    return raised.value.measurement


def test_a_limit_below_the_peak_stops_before_the_first_step(load_tiny, config, memory_limit):
    from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded

    measured = _measure(load_tiny, config, memory_limit)
    assert measured.peak > measured.resident > 0
    limit = measured.resident + measured.activations // 2
    memory_limit(limit)
    recorder = EventRecorder()
    with pytest.raises(MemoryBudgetExceeded) as raised:
        _trainer(load_tiny, config, recorder).train()
    message = str(raised.value)
    assert "mx.set_memory_limit" in message and "UNSLOTH_MLX_MEMORY_GUARD=0" in message
    assert "on_optimizer_step" not in recorder.names() and "on_step_begin" not in recorder.names()
    # The message names a batch size and a length, each computed from the measurement.
    batch = re.search(r"per_device_train_batch_size=(\d+) with gradient_accumulation_steps=(\d+)", message)
    length = re.search(r"max_seq_length=(\d+)", message)
    assert batch and length, message
    assert 1 <= int(batch.group(1)) < 4 and int(length.group(1)) < measured.length


def test_the_suggested_settings_really_fit_and_train(load_tiny, config, memory_limit):
    from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded

    measured = _measure(load_tiny, config, memory_limit)
    memory_limit(measured.resident + measured.activations * 3 // 4)
    with pytest.raises(MemoryBudgetExceeded) as raised:
        _trainer(load_tiny, config).train()
    message = str(raised.value)
    del raised  # its traceback holds the stopped trainer's model, which a real process would not keep
    batch, steps = map(
        int, re.search(r"per_device_train_batch_size=(\d+) with gradient_accumulation_steps=(\d+)", message).groups()
    )
    length = int(re.search(r"max_seq_length=(\d+)", message).group(1))
    smaller_batch = _trainer(
        load_tiny, config, per_device_train_batch_size=batch, gradient_accumulation_steps=steps
    ).train()
    assert smaller_batch.global_step == 2
    assert _trainer(load_tiny, config, max_seq_length=length).train().global_step == 2


def test_a_limit_above_the_peak_trains(load_tiny, config, memory_limit):
    measured = _measure(load_tiny, config, memory_limit)
    # Under the 1 MiB limit MLX frees eagerly and waits on pending work, so on a loaded machine the same pass can
    # peak well above that measurement under a looser limit.
    memory_limit(measured.peak * 3 // 2 + 8 * MIB)
    recorder = EventRecorder()
    output = _trainer(load_tiny, config, recorder).train()
    assert output.global_step == 2 and recorder.names().count("on_optimizer_step") == 2


def test_the_guard_turned_off_by_name_trains_under_any_limit(load_tiny, config, memory_limit, monkeypatch):
    monkeypatch.setenv("UNSLOTH_MLX_MEMORY_GUARD", "0")
    memory_limit(MIB)
    assert _trainer(load_tiny, config).train().global_step == 2


def test_a_model_that_alone_passes_the_budget_is_told_no_knob_fits(load_tiny, config, memory_limit):
    from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded

    measured = _measure(load_tiny, config, memory_limit)
    memory_limit(measured.resident // 2)
    with pytest.raises(MemoryBudgetExceeded, match="no batch size or length fits"):
        _trainer(load_tiny, config).train()


@pytest.mark.parametrize("free_mib, fits", [(0.5, False), (64 * 1024, True)])
def test_on_cpu_a_cgroups_free_memory_is_the_budget(load_tiny, config, monkeypatch, tmp_path, free_mib, fits):
    from unsloth_zoo import dataset_num_proc as policy
    from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded

    trainer = _trainer(load_tiny, config)
    cgroup = CgroupSpec(memory_limit_gb=1.0 + free_mib / 1024, memory_usage_gb=1.0)
    apply_host(monkeypatch, HostProfile(available_memory_gb=512, cgroup=cgroup), tmp_path / "host", [policy])
    if fits:
        assert trainer.train().global_step == 2
    else:
        with pytest.raises(MemoryBudgetExceeded, match=r"the memory this process may use \(cgroup free\)"):
            trainer.train()


@pytest.mark.parametrize(
    "limit, expected",
    [
        (int(1.5 * 48 * GIB), (48 * GIB, "Metal's recommended working set")),
        (20 * GIB, (20 * GIB, "mx.set_memory_limit")),
        (60 * GIB, (60 * GIB, "mx.set_memory_limit")),
    ],
    ids=["default", "user-lower", "user-higher"],
)
def test_on_metal_the_recommended_working_set_is_the_budget_unless_the_user_set_a_limit(limit, expected):
    from unsloth_zoo.mlx.memory_guard import choose_budget

    budget = choose_budget(limit, 48 * GIB, 128 * GIB, None, "")
    assert budget.limit == expected[0] and expected[1] in budget.source


def test_ranks_sharing_a_host_share_its_budget():
    from unsloth_zoo.mlx.memory_guard import choose_budget

    metal = choose_budget(int(1.5 * 48 * GIB), 48 * GIB, 128 * GIB, None, "", local_ranks=2)
    cpu = choose_budget(200 * GIB, None, None, 30 * GIB, "host available", local_ranks=3)
    assert (metal.limit, cpu.limit) == (24 * GIB, 10 * GIB) and "shared by 3 ranks" in cpu.source


_cgroups, _why_not = can_create_memory_cgroup()


@pytest.mark.skipif(not _cgroups, reason=f"cannot create a memory cgroup here: {_why_not}")
@pytest.mark.parametrize("limit_mib, outcome", [(600, "stopped"), (1024, "trained")])
def test_in_a_real_cgroup_a_run_that_would_be_killed_stops_with_the_message_and_one_that_fits_trains(
    tiny_model_dir, tmp_path, limit_mib, outcome
):
    """The tiny llama at 8 rows of 1,024 tokens peaks near 650 MiB in its first step. In a 600 MiB cgroup that pass
    meets the OOM killer (as it did before the guard measured half the batch first); the guard must stop the run
    with its message instead. In 1 GiB it trains."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO_ROOT / part) for part in ("zoo", "unsloth", ".")))
    env.pop("UNSLOTH_MLX_MEMORY_GUARD", None)
    command = [sys.executable, str(WORKLOAD), str(tiny_model_dir), "8", "1024", str(tmp_path / "out")]
    with memory_limited_cgroup(limit_mib * MIB) as cgroup:
        kills = cgroup.oom_kills()
        done = cgroup.run(command, capture_output=True, text=True, timeout=300, env=env)
        assert cgroup.oom_kills() == kills and done.returncode == 0, (done.returncode, done.stderr[-2000:])
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["outcome"] == outcome, report
    if outcome == "stopped":
        message = report["message"]
        assert "(cgroup free)" in message and "scaled to its longest micro-batch, 8 rows of 1024 tokens" in message
        assert re.search(r"per_device_train_batch_size=\d+ with gradient_accumulation_steps=\d+", message), message
    else:
        assert report["steps"] == 2


# Its 3% bound is the bundled BLAS's: under MKL one run in seven came out 3.6% apart, faster products moving when
# MLX's asynchronous evaluation frees buffers.
@pytest.mark.reference_blas
@pytest.mark.parametrize("compiled", [False, True])
def test_the_check_measures_the_pass_the_step_will_run(load_tiny, config, compiled):
    """The check's peak is the step's own pass's, compiled or not: the two hold different amounts (compiled, this
    tiny model's pass peaks about 6% higher), so a plain measurement of a compiled step would be wrong."""
    import mlx.core as mx

    from unsloth_zoo.mlx.backward_order import evaluate_gradients
    from unsloth_zoo.mlx.memory_guard import trainer_probe

    trainer = _trainer(load_tiny, config, mx_compile=compiled)
    trainer._create_optimizer(2)
    trainer._build_step_functions()
    measured = min(trainer_probe(trainer)(4, 257, False).peak for _ in range(2))
    tokens = mx.full((4, 257), trainer.pad_id, dtype=mx.int32)
    lengths = mx.full((4,), 257, dtype=mx.int32)
    stepped = []
    for _ in range(2):
        mx.eval(trainer.model.parameters(), trainer.optimizer.state, tokens, lengths)
        mx.reset_peak_memory()
        loss, count, grads = trainer._forward_backward(tokens, lengths)
        # Evaluated as the trainer's step evaluates it: the loss, then each gradient in backward order.
        evaluate_gradients(grads, loss, count)
        stepped.append(int(mx.get_peak_memory()))
    assert abs(measured - min(stepped)) <= 0.03 * min(stepped), (measured, stepped)
