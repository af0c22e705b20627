"""The benchmark's GRPO row: completion sampling, our batched sampling against mlx_lm's `batch_generate`."""

from __future__ import annotations

import json


def test_bench_reports_grpo_sampling_against_batch_generate(tmp_path, capsys):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    arguments = ["--hidden", "32", "--layers", "1", "--vocab", "512", "--steps", "0", "--repeats", "1"]
    arguments += ["--generate-tokens", "0", "--packing-rows", "0", "--prompt-len", "6"]
    arguments += ["--grpo-prompts", "2", "--grpo-generations", "3", "--grpo-tokens", "5", "--dpo-steps", "0"]
    arguments += ["--shapes", "none"]
    assert bench_mlx.main([*arguments, "--json", str(out)]) == 0

    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    result = json.loads(out.read_text())["grpo"]
    assert table[0] == "| GRPO sampling (6 completions x 5 tokens) | tokens/s (median) | vs mlx_lm |"
    assert [row.split("|")[1].strip() for row in table[2:]] == ["mlx_lm batch_generate", "unsloth GRPO sampling"]
    assert result["ratio_to_mlx_lm"]["mlx_lm batch_generate"] == 1.0
    assert all(len(rates) == 1 and rates[0] > 0 for rates in result["rates"].values())
