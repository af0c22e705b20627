"""Gradient checkpointing through the whole trainer: a peak no heavier than mlx-lm's, growing with depth only by
the blocks' inputs. Each peak is measured in a fresh interpreter (tools/bench_mlx_depth.py), so none inherits
another run's buffers."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from tools.bench_mlx_depth import peak_in_subprocess, small_llama
from tools.bench_mlx_shapes import LORA_KEYS, MLX_LM, OURS, build_shape_folder

HIDDEN, LENGTH, RANK = 128, 513, 8
# bfloat16 hidden states: what each checkpointed block keeps of its input.
ACTIVATION_BYTES = 2
# Float32 LoRA gradients and AdamW's two moments, per block.
LORA_STATE_BYTES = 3 * 4 * RANK * (4 * (HIDDEN + HIDDEN) + 3 * (HIDDEN + 3 * HIDDEN))
SLACK_BYTES = 2 * 2**20


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Dict[int, Path]:
    root = tmp_path_factory.mktemp("depth")
    return {
        layers: build_shape_folder(root / str(layers), small_llama(layers, HIDDEN), 0, root / "tokenizers")
        for layers in (12, 24)
    }


def test_our_checkpointed_peak_is_at_most_mlx_lms_on_twelve_layers(folders: Dict[int, Path]) -> None:
    assert len(LORA_KEYS) == 7
    theirs = peak_in_subprocess(MLX_LM, folders[12], LENGTH, True)["peak_bytes"]
    ours = peak_in_subprocess(OURS, folders[12], LENGTH, True)["peak_bytes"]
    assert ours <= theirs, f"ours {ours / 2**20:.1f} MiB, mlx_lm's {theirs / 2**20:.1f} MiB"


def test_the_checkpointed_peak_grows_with_depth_by_the_blocks_inputs_only(folders: Dict[int, Path]) -> None:
    added = {}
    for layers in (12, 24):
        run = peak_in_subprocess(OURS, folders[layers], LENGTH, True)
        # The weights loaded before training grow with depth too; what training adds on top is compared.
        added[layers] = run["peak_bytes"] - run["start_bytes"]
    bound = 12 * ((LENGTH - 1) * HIDDEN * ACTIVATION_BYTES + LORA_STATE_BYTES) + SLACK_BYTES
    growth = added[24] - added[12]
    assert growth <= bound, f"12 to 24 layers added {growth / 2**20:.1f} MiB, bound {bound / 2**20:.1f} MiB"
