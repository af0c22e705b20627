"""The benchmark's vision row: a vision SFT step's tokens/s, our SFTTrainer with UnslothVisionDataCollator against
mlx-vlm's own Trainer, on the same tiny Qwen 2.5 VL and rows."""

from __future__ import annotations

import json
import sys

import pytest

TINY = ["--hidden", "32", "--layers", "1", "--vocab", "512", "--steps", "0", "--repeats", "1", "--rank", "4"]
TINY += ["--shapes", "none", "--generate-tokens", "0", "--packing-rows", "0", "--grpo-prompts", "0"]
TINY += ["--dpo-steps", "0", "--batch", "2"]


class _BlockImport:
    """A meta path finder that makes `name` and its submodules fail to import, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def test_bench_reports_a_vision_step_against_mlx_vlms_trainer(tmp_path, capsys):
    pytest.importorskip("mlx_vlm", reason="mlx-vlm is installed by the mlx and bench_mlx nox sessions")
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--vision-steps", "2", "--warmup", "1", "--json", str(out)]) == 0

    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    result = json.loads(out.read_text())["vision"]
    assert table[0].startswith("| vision SFT step (qwen2_5_vl, batch 2, LoRA r4 on ")
    assert table[0].endswith("| tokens/row | tokens/s (median) | vs mlx-vlm |")
    names = [line.split("|")[1].strip() for line in table[2:]]
    assert names == ["mlx-vlm Trainer (vlm/sft)", "unsloth SFTTrainer + UnslothVisionDataCollator"]
    assert table[2].endswith("| 1.00x |")
    # Both trainers render and tokenize the same conversation to the same length.
    assert len(set(result["tokens_per_row"].values())) == 1 and result["adapted_linears"] > 0
    for name, rate in result["tokens_per_second"].items():
        assert len(result["seconds"][name]) == 1
        assert rate == pytest.approx(result["tokens_per_row"][name] * 2 * 2 / result["seconds"][name][0])


def test_bench_refuses_vision_steps_without_mlx_vlm(tmp_path, capsys, monkeypatch):
    from tools import bench_mlx

    for module in [name for name in sys.modules if name.split(".")[0] == "mlx_vlm"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("mlx_vlm"), *sys.meta_path])
    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--vision-steps", "2", "--json", str(out)]) == 2
    assert "--vision-steps 2 needs mlx-vlm" in capsys.readouterr().err
    assert not out.exists()
