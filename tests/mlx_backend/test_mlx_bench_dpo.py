"""The benchmark's DPO row: a DPO step's tokens/s, our DPOTrainer against mlx-lm-lora's `train_dpo`."""

from __future__ import annotations

import json
import sys

import pytest

TINY = ["--hidden", "32", "--layers", "1", "--vocab", "512", "--steps", "0", "--repeats", "1", "--rank", "4"]
TINY += ["--shapes", "none"]
TINY += ["--generate-tokens", "0", "--packing-rows", "0", "--grpo-prompts", "0", "--batch", "2"]


class _BlockImport:
    """A meta path finder that makes `name` and its submodules fail to import, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def without_mlx_lm_lora(monkeypatch):
    for module in [name for name in sys.modules if name.split(".")[0] == "mlx_lm_lora"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("mlx_lm_lora"), *sys.meta_path])


def test_bench_reports_a_dpo_step_against_mlx_lm_lora(tmp_path, capsys):
    pytest.importorskip("mlx_lm_lora", reason="mlx-lm-lora is installed by `nox -s bench_mlx` only")
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    arguments = [*TINY, "--dpo-steps", "2", "--warmup", "2", "--dpo-prompt-len", "6", "--dpo-answer-len", "5"]
    assert bench_mlx.main([*arguments, "--json", str(out)]) == 0

    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    result = json.loads(out.read_text())["dpo"]
    assert table[0] == "| DPO step (batch 2, 6 + 5 tokens, LoRA r4) | reference | tokens/s (median) | vs mlx-lm-lora |"
    rows = [[cell.strip() for cell in line.split("|")[1:3]] for line in table[2:]]
    assert rows == [
        ["mlx-lm-lora train_dpo", "frozen base copy"],
        ["unsloth DPOTrainer (uncompiled)", "adapters off"],
        ["unsloth DPOTrainer (mx_compile)", "adapters off"],
    ]
    assert table[2].endswith("| 1.00x |")
    assert result["ratio_to_mlx_lm_lora"]["mlx-lm-lora train_dpo"] == 1.0
    assert all(len(seconds) == 1 and seconds[0] > 0 for seconds in result["seconds"].values())
    # Tokens per step: both sequences of each pair, prompt and answer, over the timed steps.
    for name, rate in result["tokens_per_second"].items():
        assert rate == pytest.approx(2 * 2 * (6 + 5) * 2 / result["seconds"][name][0])


def test_bench_skips_the_dpo_row_without_mlx_lm_lora_and_says_why(tmp_path, capsys, without_mlx_lm_lora):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--json", str(out)]) == 0

    captured = capsys.readouterr()
    assert "mlx-lm-lora is not installed: the DPO row is skipped" in captured.err
    assert "DPO step" not in captured.out
    assert json.loads(out.read_text())["dpo"] is None


def test_bench_refuses_dpo_steps_without_mlx_lm_lora(tmp_path, capsys, without_mlx_lm_lora):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--dpo-steps", "2", "--json", str(out)]) == 2

    assert "--dpo-steps 2 needs mlx-lm-lora: pip install mlx-lm-lora" in capsys.readouterr().err
    assert not out.exists()
