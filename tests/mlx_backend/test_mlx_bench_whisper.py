"""The benchmark's Whisper row: a Whisper LoRA step, ours through the notebook's calls against mlx-tune's STT trainer.
Timing it needs mlx-tune and mlx-audio, which only `nox -s bench_mlx` installs; here the refusal and the table."""

from __future__ import annotations

import sys

TINY = ["--steps", "0", "--repeats", "1", "--shapes", "none", "--generate-tokens", "0", "--packing-rows", "0"]
TINY += ["--grpo-prompts", "0", "--dpo-steps", "0"]


class _BlockImport:
    """A meta path finder that makes `name` and its submodules fail to import, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def test_bench_refuses_whisper_steps_without_mlx_tune(tmp_path, capsys, monkeypatch):
    from tools import bench_mlx

    for module in [name for name in sys.modules if name.split(".")[0] == "mlx_tune"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("mlx_tune"), *sys.meta_path])
    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--whisper-steps", "2", "--json", str(out)]) == 2
    assert "--whisper-steps 2 needs mlx-tune and mlx-audio" in capsys.readouterr().err
    assert not out.exists()


def test_the_whisper_table_names_the_shape_and_the_ratio_to_mlx_tune():
    from tools.bench_mlx_whisper import OURS_NAME, TUNE_NAME, format_whisper_table

    result = {
        "shape": {"mel_bins": 80, "width": 64, "layers": 1, "heads": 2},
        "batch": 2,
        "lora_rank": 8,
        "clips_per_second": {TUNE_NAME: 0.5, OURS_NAME: 0.6},
        "ratio_to_mlx_tune": {TUNE_NAME: 1.0, OURS_NAME: 1.2},
    }
    table = format_whisper_table(result).splitlines()
    assert table[0].startswith("| Whisper LoRA step (1+1 layers, 64 wide, 1500 positions, batch 2, r8 on q/v)")
    assert table[2] == f"| {TUNE_NAME} | 0.500 | 4.00 | 1.00x |"
    assert table[3] == f"| {OURS_NAME} | 0.600 | 3.33 | 1.20x |"
