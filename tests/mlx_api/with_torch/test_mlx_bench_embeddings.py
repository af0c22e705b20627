"""The benchmark's embedding row: an embedding LoRA step's tokens/s, our SentenceTransformerTrainer (MNRL) against
mlx-embeddings-lora's `train_contrastive`, on one tiny shape and one timed step (`nox -s bench_mlx` runs the real one).
"""

from __future__ import annotations

import json
import sys

import pytest

# Everything but the embedding row off; the smallest model that still has a layer to put LoRA on.
TINY = ["--steps", "0", "--repeats", "1", "--warmup", "1", "--shapes", "none", "--generate-tokens", "0"]
TINY += ["--packing-rows", "0", "--grpo-prompts", "0", "--dpo-steps", "0", "--batch", "2"]
TINY += ["--embedding-hidden", "32", "--embedding-layers", "1", "--embedding-seq-len", "12"]


class _BlockImport:
    """A meta path finder that makes `name` and its submodules fail to import, as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def without_mlx_embeddings_lora(monkeypatch):
    for module in [name for name in sys.modules if name.split(".")[0] == "mlx_embeddings_lora"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("mlx_embeddings_lora"), *sys.meta_path])


def test_bench_reports_an_embedding_step_against_mlx_embeddings_lora(tmp_path, capsys):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--embedding-steps", "1", "--json", str(out)]) == 0

    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    result = json.loads(out.read_text())["embeddings"]
    assert table[0].startswith("| embedding LoRA step (Qwen3-Embedding shape, hidden 32, 1 layers; batch 2 x 2 ")
    rows = [[cell.strip() for cell in line.split("|")[1:3]] for line in table[2:]]
    assert rows == [
        ["mlx-embeddings-lora train_contrastive (mnr)", "one rolled negative, unscaled"],
        ["unsloth SentenceTransformerTrainer (MNRL) (uncompiled)", "every in-batch negative, scale 20"],
        ["unsloth SentenceTransformerTrainer (MNRL) (mx_compile)", "every in-batch negative, scale 20"],
    ]
    assert table[2].endswith("| 1.00x |")
    # Tokens per step: both columns of every row, each exactly the row length.
    for name, rate in result["tokens_per_second"].items():
        assert rate == pytest.approx(2 * 2 * 12 / result["seconds"][name][0])


def test_bench_skips_the_embedding_row_without_mlx_embeddings_lora(tmp_path, capsys, without_mlx_embeddings_lora):
    from tools import bench_mlx

    out = tmp_path / "bench.json"
    assert bench_mlx.main([*TINY, "--json", str(out)]) == 0

    assert "mlx-embeddings-lora is not installed: the embedding row is skipped" in capsys.readouterr().err
    assert json.loads(out.read_text())["embeddings"] is None


def test_bench_refuses_embedding_steps_without_mlx_embeddings_lora(tmp_path, capsys, without_mlx_embeddings_lora):
    from tools import bench_mlx

    assert bench_mlx.main([*TINY, "--embedding-steps", "2", "--json", str(tmp_path / "bench.json")]) == 2
    assert "--embedding-steps 2 needs mlx-embeddings-lora" in capsys.readouterr().err
    assert not (tmp_path / "bench.json").exists()
