"""Gradient checkpointing through the vision trainer: it lowers a run's peak, and the peak is no heavier than mlx-vlm's
own `Trainer` with `grad_checkpoint=True` on the same deep tiny Qwen 2.5 VL and rows. Each peak is measured in a
fresh interpreter (tools/bench_mlx_vision_depth.py), so none inherits another run's buffers."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import pytest

from tools.bench_mlx_vision_depth import MLX_VLM, OURS, build_deep_vlm, linears_in_subprocess, peak_in_subprocess

LAYERS, WORDS = 4, 300


@pytest.fixture(scope="module")
def peaks(tmp_path_factory: pytest.TempPathFactory) -> Dict[Tuple[str, bool], int]:
    folder = build_deep_vlm(tmp_path_factory.mktemp("vision-depth") / "model", LAYERS)
    linears = linears_in_subprocess(Path(folder))
    runs = ((OURS, False), (OURS, True), (MLX_VLM, True))
    measured = {run: peak_in_subprocess(run[0], folder, WORDS, run[1], linears) for run in runs}
    assert all(found["steps_seen"] == 2 for found in measured.values()), measured
    return {run: found["peak_bytes"] for run, found in measured.items()}


def test_checkpointing_lowers_a_vision_runs_peak(peaks) -> None:
    # A first step that checked its head inside the gradient trace held the same peak with checkpointing as without.
    on, off = peaks[(OURS, True)], peaks[(OURS, False)]
    assert on <= 0.6 * off, f"on {on / 2**20:.1f} MiB, off {off / 2**20:.1f} MiB"


def test_our_checkpointed_vision_peak_is_at_most_mlx_vlms(peaks) -> None:
    ours, theirs = peaks[(OURS, True)], peaks[(MLX_VLM, True)]
    assert ours <= theirs, f"ours {ours / 2**20:.1f} MiB, mlx-vlm's {theirs / 2**20:.1f} MiB"
