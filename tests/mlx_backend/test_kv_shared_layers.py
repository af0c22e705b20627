"""Gemma 3n's KV-shared layers: mlx_lm's uncached pass (training's) computes their own keys and values, its cached
pass (generation's) reuses an earlier layer's, so a model that has them says so once when it loads. The test pins
that the two passes really differ, so the warning goes when mlx_lm stops making them differ."""

from __future__ import annotations

import logging
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tools.kits.tiny_gguf_gemma3n import build_gemma3n_model
from unsloth_zoo.mlx.loading import load_model

TOKENS = mx.array([[5, 17, 42, 9, 33, 8, 21, 64, 3, 11]])


def _cached_and_uncached(model) -> tuple:
    uncached = np.array(model(TOKENS).astype(mx.float32))
    cached = np.array(model(TOKENS, cache=model.make_cache()).astype(mx.float32))
    return cached, uncached


@pytest.mark.parametrize("shared", [0, 2])
def test_a_model_with_kv_shared_layers_warns_that_training_takes_another_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, shared: int
) -> None:
    folder = build_gemma3n_model(tmp_path / "gemma3n", num_kv_shared_layers=shared)
    with caplog.at_level(logging.WARNING, logger="unsloth_zoo.mlx.loading"):
        model, _ = load_model(folder)
    warned = [record.message for record in caplog.records if "reuse earlier layers' keys" in record.message]
    cached, uncached = _cached_and_uncached(model)
    if shared:
        assert len(warned) == 1 and "2 layers" in warned[0], warned
        assert np.abs(cached - uncached).max() > 1e-3  # the passes differ, as the warning says
    else:
        assert not warned
        assert np.abs(cached - uncached).max() < 1e-4
