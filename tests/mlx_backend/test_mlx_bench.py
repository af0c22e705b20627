"""The tokens/s benchmark runs end to end on a minute model and reports what it measured."""

from __future__ import annotations

import json

import pytest


def test_bench_compares_both_trainers_and_writes_json(tmp_path, capsys):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    arguments = ["--hidden", "32", "--layers", "1", "--vocab", "512", "--batch", "2", "--seq-len", "17"]
    arguments += [
        "--steps",
        "3",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--rank",
        "4",
        "--compile",
        "off",
        "--json",
        str(out),
        "--prompt-len",
        "4",
        "--generate-tokens",
        "8",
        "--packing-rows",
        "0",
        "--grpo-prompts",
        "0",
        "--dpo-steps",
        "0",
        "--shapes",
        "none",
    ]
    assert bench_mlx.main(arguments) == 0

    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines[: lines.index("")] if line.startswith("|")]
    generation = [line for line in lines[lines.index("") :] if line.startswith("|")]
    assert generation[0] == "| generation | tokens/s (median) | tokens/s (best) | vs mlx_lm |"
    assert [row.split("|")[1].strip() for row in generation[2:]] == ["mlx_lm.stream_generate", "unsloth model.generate"]
    assert table[0] == "| trainer | tokens/s (median) | vs mlx_lm |"
    assert [row.split("|")[1].strip() for row in table[2:]] == ["mlx_lm", "unsloth_zoo (mx.compile off)"]
    result = json.loads(out.read_text())
    assert result["ratio_to_mlx_lm"]["mlx_lm"] == 1.0
    # 2 rows x 16 trained positions x 3 timed steps = 96 positions over the measured seconds.
    for name, seconds in result["seconds"].items():
        assert len(seconds) == 1 and seconds[0] > 0
        assert result["tokens_per_second"][name] * seconds[0] == pytest.approx(96)
    # 8 new tokens a run, each run timed whole.
    for name, seconds in result["generation"]["seconds"].items():
        assert len(seconds) == 1 and result["generation"]["tokens_per_second"][name] * seconds[0] == pytest.approx(8)
