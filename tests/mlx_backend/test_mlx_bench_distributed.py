"""The data-parallel benchmark starts 1 and 2 ranks itself and reports the gradient all_sum against the step."""

from __future__ import annotations

import json


def test_bench_reports_the_collective_share_at_one_and_two_ranks(tmp_path, capsys):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    arguments = ["--distributed-ranks", "1,2", "--steps-only", "--hidden", "32", "--layers", "1", "--vocab", "512"]
    arguments += ["--batch", "2", "--seq-len", "17", "--steps", "3", "--warmup", "1", "--repeats", "1", "--rank", "4"]
    assert bench_mlx.main([*arguments, "--compile", "off", "--json", str(out)]) == 0

    table = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ranks") or line[:4] in ("| 1 ", "| 2 ")
    ]
    assert table[0].startswith("| ranks | rows/step | LoRA grad floats | step ms | grad all_sum ms |")
    assert [row.split("|")[1].strip() for row in table[1:]] == ["1", "2"]
    one, two = json.loads(out.read_text(encoding="utf-8"))["distributed"]
    assert (one["rows_per_step"], two["rows_per_step"]) == (2, 4)
    # One rank has no collective at all; two ranks sum every LoRA gradient once per step.
    assert one["gradient_all_sum_ms"] == 0 and two["gradient_all_sum_ms"] > 0
    assert 0 < two["communication_share"] < 1 and two["gradient_floats"] == one["gradient_floats"] > 0
