"""Rule 6: train, export to GGUF with mlx_lm's converter, reload in a fresh process, compare tensors and logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import NEUTRAL_CWD

TOKEN_ROWS = [[2, 203, 38, 73, 272, 388, 73, 74, 18, 1], [3, 203, 44, 77, 266, 269, 1, 203, 5, 9]]


def _reload_in_fresh_process(gguf_path: Path, folder: Path) -> dict:
    import mlx.core as mx

    (folder / "rows.json").write_text(json.dumps(TOKEN_ROWS), encoding="utf-8")
    output = folder / "reloaded.safetensors"
    command = [sys.executable, "-m", "unsloth.mlx.gguf_reload", str(gguf_path), str(folder / "rows.json"), str(output)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, "UNSLOTH_MLX": "1"}, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, result.stderr
    arrays, metadata = mx.load(str(output), return_metadata=True)
    return {"arrays": arrays, "tokens": json.loads(metadata["tokens"])}


@pytest.fixture
def trained(load_public, chat_rows, quiet_args):
    model, tokenizer = load_public(lora=True)
    UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_steps=3)).train()
    return model, tokenizer


def test_gguf_round_trip_reproduces_weights_and_logits(trained, tmp_path: Path) -> None:
    import mlx.core as mx

    from unsloth.mlx.gguf import merged_weights
    from unsloth.mlx.gguf_reload import LOGITS_KEY

    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer)
    assert path.name == "unsloth.F32.gguf"
    reloaded = _reload_in_fresh_process(path, tmp_path)
    expected = merged_weights(model)
    weights = {name: value for name, value in reloaded["arrays"].items() if name != LOGITS_KEY}
    assert sorted(weights) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(np.array(weights[name]), np.array(value)), name
    # The trained LoRA really is folded in: the merged query projection is not the base one.
    base = np.array(model.layers[0].self_attn.q_proj.linear.weight)
    assert not np.array_equal(np.array(weights["model.layers.0.self_attn.q_proj.weight"]), base)
    logits = np.array(model(mx.array(TOKEN_ROWS)).astype(mx.float32))
    assert np.abs(np.array(reloaded["arrays"][LOGITS_KEY]) - logits).max() < 1e-4
    assert reloaded["tokens"] == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))


def test_gguf_f16_round_trip_is_close(trained, tmp_path: Path) -> None:
    import mlx.core as mx

    from unsloth.mlx.gguf_reload import LOGITS_KEY

    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "gguf16"), tokenizer, quantization_method="f16")
    assert path.name == "unsloth.F16.gguf"
    reloaded = _reload_in_fresh_process(path, tmp_path)
    assert reloaded["arrays"]["model.layers.0.mlp.up_proj.weight"].dtype == mx.float16
    assert reloaded["arrays"]["model.norm.weight"].dtype == mx.float32  # the converter keeps norms in float32
    logits = np.array(model(mx.array(TOKEN_ROWS)).astype(mx.float32))
    assert np.abs(np.array(reloaded["arrays"][LOGITS_KEY]) - logits).max() < 5e-2


def test_quantized_gguf_types_are_refused_by_name(trained, tmp_path: Path) -> None:
    model, tokenizer = trained
    with pytest.raises(NotImplementedError, match=r"quantization_method='q4_k_m'.*llama-quantize"):
        model.save_pretrained_gguf(str(tmp_path / "q"), tokenizer, quantization_method="q4_k_m")
