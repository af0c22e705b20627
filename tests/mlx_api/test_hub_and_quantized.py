"""Loading as notebooks do: a Hub id through the real Hub client (offline, from a cache folder built here),
`load_in_4bit` / `load_in_8bit` with QLoRA trained for real, and saved adapters and merges of a quantized base."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from .conftest import QUESTIONS, chat_text, run_python

REVISION = "0123456789abcdef0123456789abcdef01234567"


def build_hub_cache(hf_home: Path, repo_id: str, model_dir: Path) -> Path:
    """The layout huggingface_hub keeps under HF_HOME: hub/models--org--name/{refs/main, snapshots/<rev>/...}."""
    repo_folder = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo_folder / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for path in model_dir.iterdir():
        if path.is_file():
            shutil.copyfile(path, snapshot / path.name)
    (repo_folder / "refs").mkdir()
    (repo_folder / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return snapshot


TRAIN_FROM_HUB = """
import json, os
from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments
import mlx.nn as nn
rows = json.loads(os.environ["TEST_ROWS"])
model, tokenizer = FastLanguageModel.from_pretrained("tiny-org/tiny-llama", max_seq_length=64, load_in_4bit=True)
quantized = type(model.layers[0].self_attn.q_proj).__name__
model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
base = type(model.layers[0].self_attn.q_proj.linear).__name__
args = UnslothTrainingArguments(output_dir=os.environ["TEST_OUT"], per_device_train_batch_size=4,
    gradient_accumulation_steps=1, max_steps=5, warmup_steps=0, learning_rate=5e-3, logging_steps=1,
    save_strategy="no")
trainer = UnslothTrainer(model, tokenizer, rows, args=args)
trainer.train()
losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
print(json.dumps({"quantized": quantized, "lora_base": base, "losses": losses,
    "source": model.unsloth_source_path}))
"""


def test_hub_id_loads_offline_in_4bit_and_qlora_trains(tiny_model_dir, tmp_path, monkeypatch) -> None:
    hf_home = tmp_path / "hf-home"
    snapshot = build_hub_cache(hf_home, "tiny-org/tiny-llama", tiny_model_dir)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TEST_ROWS", json.dumps([{"text": chat_text(q, a)} for q, a in QUESTIONS]))
    monkeypatch.setenv("TEST_OUT", str(tmp_path / "out"))
    found = run_python(TRAIN_FROM_HUB, timeout=300)
    assert found["quantized"] == "QuantizedLinear" and found["lora_base"] == "QuantizedLinear"
    assert Path(found["source"]) == snapshot.resolve()
    losses = found["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] - 0.5, losses


def test_hub_id_missing_from_the_offline_cache_says_how_to_fix_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = run_python(
        "import json\n"
        "from unsloth import FastLanguageModel\n"
        "try:\n"
        "    FastLanguageModel.from_pretrained('nobody/nothing')\n"
        "except FileNotFoundError as error:\n"
        "    print(json.dumps({'error': str(error)}))\n"
    )
    assert "nobody/nothing is neither a local folder nor a snapshot" in found["error"]
    assert "HF_HUB_OFFLINE" in found["error"] and "HF_HOME" in found["error"]


@pytest.mark.parametrize("bits", [4, 8])
def test_load_in_n_bit_quantizes_every_linear_with_group_size_64(load_public, bits) -> None:
    import mlx.nn as nn

    model, _ = load_public(**{f"load_in_{bits}bit": True})
    linears = [module for _, module in model.named_modules() if isinstance(module, nn.QuantizedLinear)]
    assert len(linears) == 2 * 7  # q, k, v, o, gate, up, down in each of the two blocks
    assert {(module.bits, module.group_size) for module in linears} == {(bits, 64)}
    assert not [path for path, module in model.named_modules() if type(module) is nn.Linear]
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)


def test_both_bit_widths_at_once_and_full_finetuning_of_a_quantized_base_are_refused(tiny_model_dir) -> None:
    from unsloth import FastLanguageModel

    with pytest.raises(ValueError, match="choose one"):
        FastLanguageModel.from_pretrained(str(tiny_model_dir), load_in_4bit=True, load_in_8bit=True)
    with pytest.raises(NotImplementedError, match="full_finetuning=True with load_in_4bit=True"):
        FastLanguageModel.from_pretrained(str(tiny_model_dir), load_in_4bit=True, full_finetuning=True)


def _trained_qlora(load_public, chat_rows, quiet_args):
    from unsloth import UnslothTrainer

    model, tokenizer = load_public(lora=True, load_in_4bit=True)
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_steps=3, learning_rate=1e-2))
    trainer.train()
    return model, tokenizer


def _logits(model, tokenizer) -> np.ndarray:
    import mlx.core as mx

    ids = tokenizer("The kettle is red.", add_special_tokens=False)["input_ids"]
    return np.array(model(mx.array([ids])).astype(mx.float32))


def test_saved_adapter_reloads_onto_a_freshly_quantized_base_with_the_same_logits(
    load_public, chat_rows, quiet_args, tmp_path
) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = _trained_qlora(load_public, chat_rows, quiet_args)
    model.save_pretrained(str(tmp_path / "adapter"))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["quantization"] == {"bits": 4, "group_size": 64}
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "adapter"))
    assert type(reloaded.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"
    trained = _logits(model, tokenizer)
    np.testing.assert_array_equal(_logits(reloaded, tokenizer), trained)
    # The untrained base differs, so equal logits mean the adapter really came back.
    base, _ = FastLanguageModel.from_pretrained(config["base_model_name_or_path"], load_in_4bit=True)
    assert np.abs(_logits(base, tokenizer) - trained).max() > 1e-3


def test_merged_save_of_a_quantized_base_dequantizes_and_loads_back(
    load_public, chat_rows, quiet_args, tmp_path
) -> None:
    import mlx.core as mx
    from mlx_lm import load

    model, tokenizer = _trained_qlora(load_public, chat_rows, quiet_args)
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_32bit")
    saved = mx.load(str(tmp_path / "merged" / "model.safetensors"))
    assert not [name for name in saved if name.endswith((".scales", ".biases"))]
    assert "quantization" not in json.loads((tmp_path / "merged" / "config.json").read_text())
    merged, _ = load(str(tmp_path / "merged"))
    # The merge is the quantized base's own values plus the LoRA delta, so both compute the same logits.
    np.testing.assert_allclose(_logits(merged, tokenizer), _logits(model, tokenizer), atol=1e-4)
    assert type(model.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"  # the trained model is untouched


def test_merged_4bit_writes_mlx_4bit_that_mlx_lm_loads(load_public, chat_rows, quiet_args, tmp_path, capsys) -> None:
    import mlx.core as mx
    import mlx.nn as mx_nn
    from mlx_lm import load

    model, tokenizer = _trained_qlora(load_public, chat_rows, quiet_args)
    folder = model.save_pretrained_merged(str(tmp_path / "four"), tokenizer, save_method="merged_4bit")
    note = capsys.readouterr().out
    assert "MLX's 4-bit format" in note and "not bitsandbytes'" in note
    config = json.loads((folder / "config.json").read_text())
    assert (config["quantization"]["bits"], config["quantization"]["group_size"]) == (4, 64)
    saved = mx.load(str(folder / "model.safetensors"))
    assert saved["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32  # packed 4-bit, with scales and biases
    assert "model.layers.0.self_attn.q_proj.scales" in saved
    four_bit, _ = load(str(folder))
    assert type(four_bit.layers[0].self_attn.q_proj).__name__ == "QuantizedLinear"
    # It is the full-precision merge quantized as mlx_lm.convert -q does: same logits as quantizing that by hand.
    model.save_pretrained_merged(str(tmp_path / "full"), tokenizer, save_method="merged_32bit")
    by_hand, _ = load(str(tmp_path / "full"))
    mx_nn.quantize(by_hand, group_size=64, bits=4)
    np.testing.assert_allclose(_logits(four_bit, tokenizer), _logits(by_hand, tokenizer), atol=1e-5)


def test_gguf_export_of_a_quantized_base_writes_the_dequantized_merge(
    load_public, chat_rows, quiet_args, tmp_path
) -> None:
    import mlx.core as mx

    from unsloth.mlx.models.merged import merged_weights
    from unsloth.mlx.models.quantize import dequantized_copy

    model, tokenizer = _trained_qlora(load_public, chat_rows, quiet_args)
    # f32, so the written matrices can be compared exactly (the default, q8_0, re-encodes them in blocks).
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    written = mx.load(str(path))
    assert not [name for name in written if name.endswith(".scales")]
    expected = merged_weights(dequantized_copy(model))
    value = np.array(expected["model.layers.0.self_attn.v_proj.weight"])
    # The converter reorders q and k rows for llama.cpp's rotary layout; v is written as it is.
    assert np.array_equal(np.array(written["blk.0.attn_v.weight"]).reshape(value.shape), value)
    assert type(model.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"


def test_a_quantized_model_saved_whole_loads_back_quantized(load_public, tmp_path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = load_public(load_in_8bit=True)
    model.save_pretrained(str(tmp_path / "whole"), tokenizer)
    config = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert config["quantization"] == {"bits": 8, "group_size": 64}
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "whole"))
    assert type(reloaded.layers[0].mlp.down_proj).__name__ == "QuantizedLinear"
    np.testing.assert_array_equal(_logits(reloaded, tokenizer), _logits(model, tokenizer))


def test_load_in_4bit_quantizes_moe_experts_and_lora_on_them_trains(tmp_path: Path) -> None:
    """The experts are most of a MoE's weights: load_in_4bit makes them QuantizedSwitchLinear, as mlx_lm's quantize
    does, and LoRA on them (gate_up_proj, down_proj) lowers the loss; the merged save holds them in float again."""
    import mlx.core as mx
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from tools.kits.tiny_moe_models import write_moe_model
    from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments

    # Expert widths of 64, the group size, so every expert matrix can be quantized.
    folder = write_moe_model(tmp_path / "moe", "qwen3_moe", moe_intermediate_size=64)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder), max_seq_length=64, load_in_4bit=True)
    experts = model.layers[0].mlp.switch_mlp
    assert all(isinstance(experts[name], QuantizedSwitchLinear) for name in ("gate_proj", "up_proj", "down_proj"))
    assert experts.up_proj.bits == 4
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, target_modules=["gate_up_proj", "down_proj"])
    experts = model.layers[0].mlp.switch_mlp
    assert isinstance(experts.up_proj, LoRASwitchLinear) and isinstance(experts.up_proj.linear, QuantizedSwitchLinear)
    rows = [{"text": f"The kettle number {n % 4} boils water for tea."} for n in range(16)]
    arguments = UnslothTrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_steps=12,
        warmup_steps=0,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        max_seq_length=32,
    )
    trainer = UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=rows, args=arguments)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.7 * losses[0], losses
    merged = model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_16bit")
    weights = mx.load(str(merged / "model.safetensors"))
    name = "model.layers.0.mlp.switch_mlp.up_proj.weight"
    assert name in weights and weights[name].shape == (4, 64, 64), sorted(weights)[:8]
