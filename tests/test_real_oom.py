"""A real out-of-memory run: a 512 MiB cgroup, a map sized by the old heuristic, then by the policy.

Skips (with the reason) where this machine cannot create a memory cgroup; never passes without running.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tools.oom_cgroup import can_create_memory_cgroup, memory_limited_cgroup

WORKLOAD = Path(__file__).parent / "workloads" / "oom_map.py"
LIMIT_BYTES = 512 << 20

_possible, _why = can_create_memory_cgroup()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _possible, reason=f"cannot create a memory cgroup here: {_why}")]


def _run_in_cgroup(handle, mode: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "UNSLOTH_DATASET_NUM_PROC"}
    result = handle.run([sys.executable, str(WORKLOAD), mode], capture_output=True, text=True, timeout=180, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"workload printed no result (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(lines[-1])


def test_naive_count_is_oom_killed_and_the_policy_sized_map_completes():
    with memory_limited_cgroup(LIMIT_BYTES) as handle:
        kills_before = handle.oom_kills()
        naive = _run_in_cgroup(handle, "naive")
        assert handle.oom_kills() > kills_before, "the naive run should have met the kernel OOM killer"
        sized = _run_in_cgroup(handle, "policy")

    assert naive["num_proc"] == min(max(os.cpu_count() + 4, 2), 64)
    assert naive["outcome"] == "failed"
    assert "killed by SIGKILL (exit code -9)" in naive["message"]
    assert "the kernel OOM killer fired during the map" in naive["message"]
    assert "memory.oom_control" in naive["message"] or "memory.events" in naive["message"]

    assert sized["outcome"] == "completed", sized
    assert sized["decided_by"] == "memory" and sized["num_proc"] is None, sized
    assert "cgroup free" in sized["reason"]
