"""Rule 6: train, export to GGUF with the project's converter, reload in a fresh process, compare tensors and logits."""

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
    command = [sys.executable, "-m", "unsloth.mlx.gguf.reload", str(gguf_path), str(folder / "rows.json"), str(output)]
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

    from unsloth.mlx.models.merged import merged_weights
    from unsloth.mlx.gguf.reload import LOGITS_KEY

    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="not_quantized")
    assert path.name == "unsloth.F32.gguf"  # the tiny model is float32, and not_quantized keeps the model's type
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

    from unsloth.mlx.gguf.reload import LOGITS_KEY

    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "gguf16"), tokenizer, quantization_method="f16")
    assert path.name == "unsloth.F16.gguf"
    reloaded = _reload_in_fresh_process(path, tmp_path)
    assert reloaded["arrays"]["model.layers.0.mlp.up_proj.weight"].dtype == mx.float16
    assert reloaded["arrays"]["model.norm.weight"].dtype == mx.float32  # the converter keeps norms in float32
    logits = np.array(model(mx.array(TOKEN_ROWS)).astype(mx.float32))
    assert np.abs(np.array(reloaded["arrays"][LOGITS_KEY]) - logits).max() < 5e-2


class _BlockLlamaCpp:
    """A meta path finder that makes `import llama_cpp` fail, as on a machine without llama-cpp-python."""

    def find_spec(self, name, path=None, target=None):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


@pytest.fixture
def without_llama_cpp(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [_BlockLlamaCpp(), *sys.meta_path])
    for name in [name for name in sys.modules if name == "llama_cpp" or name.startswith("llama_cpp.")]:
        monkeypatch.delitem(sys.modules, name)


def test_k_quant_mixes_are_written_without_llama_cpp_and_unknown_names_are_refused(
    trained, tmp_path, without_llama_cpp
):
    import gguf

    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "k"), tokenizer, quantization_method="quantized")
    assert path.name == "unsloth.Q4_K_M.gguf"
    reader = gguf.GGUFReader(str(path))
    assert gguf.LlamaFileType(reader.fields["general.file_type"].contents()).name == "MOSTLY_Q4_K_M"
    # The tiny model's rows are 64 wide, too narrow for 256-wide Q4_K blocks: llama.cpp's stand-in is Q5_0, and
    # the embedding the model shares with its output is Q8_0 (llama_tensor_get_type's rule for a narrow output).
    kinds = {tensor.name: tensor.tensor_type.name for tensor in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == "Q5_0" and kinds["token_embd.weight"] == "Q8_0"
    available = "available here: not_quantized, fast_quantized, quantized, f32, f16, bf16, q8_0, q5_1, q5_0, q4_1"
    with pytest.raises(NotImplementedError, match=rf"'q9_9'.*not a llama.cpp quantization method.*{available}"):
        model.save_pretrained_gguf(str(tmp_path / "q"), tokenizer, quantization_method="q9_9")
    # A list holding one such name is refused before anything is written, too.
    with pytest.raises(NotImplementedError, match="q9_9"):
        model.save_pretrained_gguf(str(tmp_path / "q"), tokenizer, quantization_method=["q8_0", "q9_9"])
    assert not (tmp_path / "q").exists()


def _file_types(path: Path) -> tuple:
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {tensor.name: tensor.tensor_type.name for tensor in reader.tensors}
    token_type = reader.fields["tokenizer.ggml.token_type"]
    file_type = gguf.LlamaFileType(reader.fields["general.file_type"].contents()).name
    return tensors, file_type, token_type.types[-1].name


def test_default_is_cuda_unsloths_fast_quantized_which_is_q8_0(trained, tmp_path: Path) -> None:
    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / "default"), tokenizer)
    assert path.name == "unsloth.Q8_0.gguf"
    tensors, file_type, token_type = _file_types(path)
    assert file_type == "MOSTLY_Q8_0"
    # Every matrix is Q8_0 and the norms stay float32, as llama-quantize --pure writes it; token types are int32.
    assert {name: kind for name, kind in tensors.items() if kind != "Q8_0"} == {
        name: "F32" for name in tensors if name.endswith("norm.weight")
    }
    assert token_type == "INT32"


@pytest.mark.parametrize(
    ("method", "file_name", "matrix_type", "file_type"),
    [
        ("fast_quantized", "unsloth.Q8_0.gguf", "Q8_0", "MOSTLY_Q8_0"),
        ("Q4_0", "unsloth.Q4_0.gguf", "Q4_0", "MOSTLY_Q4_0"),
        ("q5_1", "unsloth.Q5_1.gguf", "Q5_1", "MOSTLY_Q5_1"),
        ("bf16", "unsloth.BF16.gguf", "BF16", "MOSTLY_BF16"),
        ("f16", "unsloth.F16.gguf", "F16", "MOSTLY_F16"),
    ],
)
def test_each_method_writes_its_llama_cpp_file_type(trained, tmp_path, method, file_name, matrix_type, file_type):
    model, tokenizer = trained
    path = model.save_pretrained_gguf(str(tmp_path / method), tokenizer, quantization_method=method)
    assert path.name == file_name
    tensors, written_type, _ = _file_types(path)
    assert written_type == file_type
    assert tensors["blk.0.attn_q.weight"] == tensors["token_embd.weight"] == matrix_type
    assert tensors["blk.0.attn_norm.weight"] == "F32"
    assert sorted(item.name for item in path.parent.iterdir() if item.suffix == ".gguf") == [file_name]


def test_a_list_of_methods_writes_one_file_each(trained, tmp_path: Path) -> None:
    model, tokenizer = trained
    paths = model.save_pretrained_gguf(str(tmp_path / "many"), tokenizer, quantization_method=["q8_0", "f16"])
    assert [path.name for path in paths] == ["unsloth.Q8_0.gguf", "unsloth.F16.gguf"]
    assert all(path.is_file() for path in paths)
