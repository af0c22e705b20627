"""The benchmark's real-shape table: a LoRA step of ours against mlx_lm's trainer, checkpointing off and on."""

from __future__ import annotations

import json

import pytest

TINY = ["--steps", "0", "--generate-tokens", "0", "--packing-rows", "0", "--grpo-prompts", "0", "--dpo-steps", "0"]
# Llama-3.2-1B's shape cut to one block at 1/32 of its widths: hidden 64, one head of 64, MLP 256, vocabulary 4,008.
SHAPE = ["--shapes", "Llama-3.2-1B", "--shape-layers", "1", "--shape-width-divisor", "32", "--batch", "2"]
SHAPE += ["--shape-lengths", "17,33", "--shape-bits", "16,4", "--shape-warmup", "1", "--shape-steps", "1"]
SHAPE += ["--shape-peak-rows", "64"]


def test_bench_reports_both_trainers_at_every_shape_base_length_and_checkpointing(tmp_path, capsys):
    import mlx_lm.models.llama as llama

    from tools import bench_mlx

    plain_call = llama.TransformerBlock.__call__
    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, *SHAPE, "--json", str(out)]) == 0

    # mlx_lm's checkpointing rewrites the block class itself; the bench puts it back for the runs after it.
    assert llama.TransformerBlock.__call__ is plain_call
    header, table, growth, goals = [block.splitlines() for block in capsys.readouterr().out.strip().split("\n\n")]
    assert header[0].startswith("LoRA r8 on all linears, batch 2, median of 1 steps after 1; load average ")
    assert table[0].split("|")[1:-1] == [
        " shape ",
        " base ",
        " tokens ",
        " checkpointing ",
        " trainer ",
        " tokens/s ",
        " vs mlx_lm ",
        " peak memory (MB) ",
        " vs mlx_lm ",
        " of peak matmul ",
    ]
    cells = [[field.strip() for field in row.split("|")[1:-1]] for row in table[2:]]
    expected = [
        [base, length, switch, trainer]
        for base in ("bf16", "4-bit")
        for length in ("17", "33")
        for switch in ("off", "on")
        for trainer in ("mlx_lm train", "unsloth SFTTrainer")
    ]
    assert [[cell[1], cell[2], cell[3].split(" (")[0], cell[4]] for cell in cells] == expected
    shape = "Llama-3.2-1B, 1 of 16 layers, widths / 32 (hidden 64, MLP 256, vocab 4,008, heads 1/1 of 64)"
    assert {cell[0] for cell in cells} == {shape}
    assert all(cell[6] == "1.00x" and cell[8] == "1.00x" for cell in cells if cell[4] == "mlx_lm train")
    assert (
        growth[0]
        == "| shape | base | checkpointing | trainer | peak MB at 17 | at 33 | added | tokens/s at 33 / at 17 |"
    )
    assert [[field.strip() for field in row.split("|")[2:5]] for row in growth[2:]] == [
        [base, switch, trainer]
        for base in ("bf16", "4-bit")
        for switch in ("off", "on")
        for trainer in ("mlx_lm train", "unsloth SFTTrainer")
    ]
    assert [line.split(":")[0] for line in goals] == [
        *[f"- checkpointing {switch}" for switch in ("off", "off", "on", "on")],
        *[
            f"- {trainer}, Llama-3.2-1B {base}"
            for trainer in ("unsloth SFTTrainer", "mlx_lm train")
            for base in ("bf16", "4-bit")
        ],
    ]

    result = json.loads(out.read_text())["shapes"]
    assert len(result["cells"]) == 8
    for cell in result["cells"]:
        # 2 rows of `length` ids train on `length - 1` positions each.
        assert cell["positions_per_step"] == 2 * (cell["length"] - 1)
        for run in cell["runs"].values():
            assert len(run["step_seconds"]) == 1 and run["step_seconds"][0] > 0
            assert run["peak_bytes"] > run["start_bytes"] > 0


def test_step_flops_counts_forward_input_gradients_lora_and_causal_attention():
    from tools.bench_mlx_shapes import step_flops

    config = {
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 2,
        "num_hidden_layers": 3,
        "vocab_size": 10,
    }
    # Linears (in, out): q 4x4, k 4x2, v 4x2, o 4x4, gate 4x8, up 4x8, down 8x4: 144 weights, in + out summed 64.
    # Per position: the base, 2 FLOPs a weight forward and again for the input gradient, 576; LoRA r1, forward and
    # two gradients, 3 x 2 x 64 = 384; attention, two products of 2 FLOPs for 2 heads of 2 over 5 / 2 keys, forward
    # and two gradients, 3 x 40 = 120. Three layers of 1,080, and the output matrix 2 x 2 x 4 x 10 = 160: 3,400 a
    # position; rows of 5 ids train 4 positions, and there are 2 rows.
    assert step_flops(config, batch=2, length=5, rank=1) == 2 * 4 * 3400


def test_reduced_shape_keeps_head_size_and_refuses_a_divisor_that_splits_heads():
    from tools.bench_mlx_shapes import QWEN2_5_0_5B, reduced_config

    reduced = reduced_config(QWEN2_5_0_5B, layers=2, width_divisor=7)
    assert (reduced["hidden_size"], reduced["num_attention_heads"], reduced["head_dim"]) == (128, 2, 64)
    assert (reduced["num_key_value_heads"], reduced["intermediate_size"], reduced["vocab_size"]) == (1, 704, 21705)
    assert reduced["num_hidden_layers"] == 2 and QWEN2_5_0_5B["num_hidden_layers"] == 24
    with pytest.raises(ValueError, match="does not divide this shape's 14 attention heads"):
        reduced_config(QWEN2_5_0_5B, layers=2, width_divisor=4)


def _cell(bits, length, checkpointing, ours_peak, mlx_lm_peak):
    runs = {
        "mlx_lm train": {"step_seconds": [2.0], "peak_bytes": mlx_lm_peak * 2**20, "start_bytes": 10 * 2**20},
        "unsloth SFTTrainer": {"step_seconds": [1.0], "peak_bytes": ours_peak * 2**20, "start_bytes": 10 * 2**20},
    }
    described = "Llama-3.2-1B, 2 of 16 layers"
    settings = {"shape": "Llama-3.2-1B", "described": described, "bits": bits, "length": length}
    return {
        **settings,
        "checkpointing": checkpointing,
        "positions_per_step": length - 1,
        "step_flops": 1e9,
        "runs": runs,
    }


def test_tables_flag_a_checkpointing_run_that_saves_nothing_and_skip_lengths_not_measured():
    from tools.bench_mlx_shapes import format_shapes_table

    cells = [
        _cell(16, 512, False, ours_peak=110, mlx_lm_peak=120),
        _cell(16, 512, True, ours_peak=60, mlx_lm_peak=70),
        _cell(16, 2048, False, ours_peak=410, mlx_lm_peak=500),
        _cell(16, 2048, True, ours_peak=405, mlx_lm_peak=200),
        _cell(4, 512, False, ours_peak=50, mlx_lm_peak=50),
        _cell(4, 512, True, ours_peak=30, mlx_lm_peak=30),
    ]
    result = {"batch": 1, "lora_rank": 8, "warmup": 1, "steps": 1, "cells": cells}
    result |= {"load_average": {"before": [1.0], "after": [2.0]}, "peak_matmul_flops": {"float32 1x1x1": 1e10}}
    _, table, growth, goals = [block.splitlines() for block in format_shapes_table(result).split("\n\n")]

    switches = [row.split("|")[4].strip() for row in table[2:] if "unsloth" in row]
    # 512 tokens: 50 of 100 MB added, saved; 2,048: 395 of 400 MB added, under a tenth saved.
    assert switches == ["off", "on", "off", "on (saved under 10%)", "off", "on"]
    # Ours takes 1 s a step against mlx_lm's 2, so 1e9 FLOP/s: a tenth of the 1e10 peak; 405 MB against 200.
    assert "| 2,048 | on (saved under 10%) | unsloth SFTTrainer | 2,047.0 | 2.00x | 405 | 2.02x | 10% |" in table[9]
    # The 4-bit base has no 2,048-token cells, so no growth rows and no goal line of its own.
    assert [row.split("|")[2].strip() for row in growth[2:]] == ["bf16"] * 4
    assert goals[0] == "- checkpointing off: tokens/s at least mlx_lm's in 3 of 3 cells"
    assert goals[3] == "- checkpointing on: peak memory at most mlx_lm's in 2 of 3 cells"
    assert goals[4:] == [
        "- unsloth SFTTrainer, Llama-3.2-1B bf16: 512 to 2,048 tokens adds 345 MB with checkpointing, 300 MB without",
        "- mlx_lm train, Llama-3.2-1B bf16: 512 to 2,048 tokens adds 130 MB with checkpointing, 380 MB without",
    ]


def test_goals_say_nothing_of_growth_when_one_length_was_measured():
    from tools.bench_mlx_shapes import format_goals

    cells = [_cell(16, 512, False, ours_peak=110, mlx_lm_peak=120), _cell(16, 512, True, ours_peak=60, mlx_lm_peak=70)]
    assert not [line for line in format_goals({"cells": cells}).splitlines() if "tokens adds" in line]
