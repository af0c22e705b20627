"""The benchmark's packing row: the same rows trained with packing on and off, real target tokens per second."""

from __future__ import annotations

import json

import pytest


def test_bench_reports_packing_on_and_off(tmp_path, capsys):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    arguments = ["--hidden", "32", "--layers", "1", "--vocab", "512", "--batch", "2", "--seq-len", "33"]
    arguments += ["--steps", "0", "--repeats", "1", "--rank", "4", "--generate-tokens", "0", "--packing-rows", "8"]
    arguments += ["--grpo-prompts", "0", "--dpo-steps", "0", "--shapes", "none"]
    assert bench_mlx.main([*arguments, "--json", str(out)]) == 0

    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    result = json.loads(out.read_text())["packing"]
    assert table[0] == f"| packing (8 rows -> {result['packed_sequences']} packed) | tokens/s (median) |"
    assert [row.split("|")[1].strip() for row in table[2:]] == ["packing off", "packing on"]
    assert result["packed_sequences"] < 8
    for name, seconds in result["seconds"].items():
        assert len(seconds) == 1 and result["tokens_per_second"][name] * seconds[0] == pytest.approx(
            result["target_tokens"]
        )
