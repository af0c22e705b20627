"""`max_seq_length` past the model's positions extends RoPE as CUDA Unsloth does (linear scaling by the ratio, in the
config's `rope_scaling`; a Llama 3 scaling kept), instead of clamping: training and generation run at the longer
length, and the merged folder, a full save and the GGUF file keep the scaling."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

POSITIONS = 512  # the tiny models' max_position_embeddings
LONG = 2048


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    return build_tiny_mlx_model(tmp_path_factory.mktemp("qwen2") / "model", architecture="qwen2")


def _hand_scaled(folder: Path, tmp_path: Path) -> Path:
    """The same weights with config.json edited by hand to linear RoPE scaling by 4, as transformers writes it."""
    copy = tmp_path / "hand_scaled"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config.update(max_position_embeddings=LONG, rope_scaling={"type": "linear", "factor": 4.0})
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _ropes(model) -> list:
    return [module.scale for _, module in model.named_modules() if isinstance(module, nn.RoPE)]


def test_the_extension_keys_follow_cuda_unsloth() -> None:
    from unsloth_zoo.mlx.loading import extended_context

    plain = {"max_position_embeddings": 2048, "rope_theta": 1e6}
    assert extended_context(plain, 2048) == {} and extended_context(plain, None) == {}
    assert extended_context(plain, 4096) == {
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "linear", "type": "linear", "factor": 2.0},
    }
    llama3 = {**plain, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    assert extended_context(llama3, 4096) == {"max_position_embeddings": 4096}
    linear = {**plain, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert extended_context(linear, 4096)["rope_scaling"]["factor"] == 4.0
    with pytest.raises(NotImplementedError, match=r"max_seq_length=4096 .* 'yarn' RoPE scaling"):
        extended_context({**plain, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 4096)


def test_a_longer_context_scales_rope_like_the_config_says(qwen2_dir: Path, tmp_path: Path) -> None:
    from mlx_lm import load

    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(str(qwen2_dir), max_seq_length=LONG)
    assert model.max_seq_length == LONG and model.args.max_position_embeddings == LONG
    assert _ropes(model) == [0.25, 0.25]
    reference, _ = load(str(_hand_scaled(qwen2_dir, tmp_path)))
    plain, _ = FastLanguageModel.from_pretrained(str(qwen2_dir))
    tokens = mx.array([list(range(2, 40)) * 20])  # 760 tokens, past the 512 positions
    np.testing.assert_allclose(np.array(model(tokens)), np.array(reference(tokens)), atol=1e-5)
    assert not np.allclose(np.array(model(tokens)), np.array(plain(tokens)), atol=1e-3)
    assert plain.max_seq_length == POSITIONS  # the default 2048 is still clamped to a model's own positions


def _greedy(model, prompt: list, count: int) -> list:
    """Greedy decoding with one full forward pass per token (no cache), the plainest reference."""
    tokens = list(prompt)
    for _ in range(count):
        tokens.append(int(mx.argmax(model(mx.array([tokens]))[0, -1]).item()))
    return tokens[len(prompt) :]


def test_generation_past_the_models_positions(qwen2_dir: Path, tmp_path: Path) -> None:
    from mlx_lm import load

    from unsloth import FastLanguageModel

    # Attention weights made sharper, so which position a token sits at decides the greedy choice.
    sharp = tmp_path / "sharp"
    shutil.copytree(qwen2_dir, sharp)
    weights = mx.load(str(sharp / "model.safetensors"))
    attention = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")
    weights = {name: value * 6 if name.endswith(attention) else value for name, value in weights.items()}
    mx.save_safetensors(str(sharp / "model.safetensors"), weights)
    model, _ = FastLanguageModel.from_pretrained(str(sharp), max_seq_length=LONG)
    prompt = [int(token) for token in np.random.default_rng(0).integers(2, 500, size=600)]
    ours = model.generate(input_ids=[prompt], max_new_tokens=6).tolist()[0][-6:]
    scaled, _ = load(str(_hand_scaled(sharp, tmp_path)))
    unscaled, _ = load(str(sharp))
    assert _greedy(unscaled, prompt, 6) != _greedy(scaled, prompt, 6)  # so the comparison below can fail
    assert ours == _greedy(scaled, prompt, 6)


def test_training_runs_at_the_longer_length(qwen2_dir: Path, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments

    model, tokenizer = FastLanguageModel.from_pretrained(str(qwen2_dir), max_seq_length=1024)
    model = FastLanguageModel.get_peft_model(model, r=8)
    row = {"text": " ".join(f"word{n}" for n in range(400))}
    assert len(tokenizer(row["text"])["input_ids"]) > POSITIONS
    args = UnslothTrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=1, max_steps=1, save_strategy="no"
    )
    trainer = UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=[row], args=args)
    assert trainer.args.max_seq_length == 1024
    result = trainer.train()
    assert np.isfinite(result.training_loss)


def test_saved_merged_and_gguf_files_keep_the_scaling(qwen2_dir: Path, tmp_path: Path) -> None:
    import gguf

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(qwen2_dir), max_seq_length=LONG)
    full = tmp_path / "full"
    model.save_pretrained(str(full), tokenizer)
    model = FastLanguageModel.get_peft_model(model, r=8)
    merged = model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_16bit")
    for folder in (full, merged):
        config = json.loads((folder / "config.json").read_text())
        assert config["rope_scaling"]["factor"] == 4.0 and config["max_position_embeddings"] == LONG, folder
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f16")
    reader = gguf.GGUFReader(str(path[0] if isinstance(path, list) else path))
    fields = {name: field.contents() for name, field in reader.fields.items() if name.startswith("qwen2.")}
    assert fields["qwen2.rope.scaling.type"] == "linear"
    assert fields["qwen2.rope.scaling.factor"] == pytest.approx(4.0)
    assert fields["qwen2.context_length"] == LONG


@pytest.mark.parametrize(
    ("architecture", "scales"),
    [
        ("lfm2", [0.5, 0.5]),  # mlx_lm's class builds a plain RoPE without reading rope_scaling
        ("gemma2", [0.5, 0.5]),  # likewise
        ("phi3", [0.5, 0.5]),  # mlx_lm's class accepts LongRoPE only, so it is built unscaled and scaled after
        ("gemma3_text", [0.5, 1.0]),  # as in transformers, the global layers scale and the local ones keep theirs
    ],
)
def test_each_family_scales_its_rotary_layers(tmp_path: Path, architecture: str, scales: list) -> None:
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model
    from unsloth import FastLanguageModel

    if architecture == "lfm2":
        folder = build_tiny_hybrid_model(tmp_path / architecture, architecture)
        length = 512  # twice its 256 positions
    else:
        folder = build_tiny_mlx_model(tmp_path / architecture, architecture=architecture)
        length = 1024
    model, _ = FastLanguageModel.from_pretrained(str(folder), max_seq_length=length)
    assert sorted(_ropes(model)) == scales and model.max_seq_length == length
    assert model(mx.array([list(range(2, 100)) * 6])).shape[1] == 588  # runs past the old positions


# YaRN as Qwen 3's long-context configs write it, in transformers 5's `rope_parameters` layout too.
QWEN3_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "attention_factor": 1.2}


@pytest.mark.parametrize("layout", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_yarn_is_written_with_the_keys_llama_cpp_s_converter_writes(tmp_path: Path, model_type: str, layout: str):
    import gguf

    from tools.kits.tiny_gguf_families import qwen3_config
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    scaling = {**QWEN3_YARN, "rope_theta": 10000.0} if layout == "rope_parameters" else QWEN3_YARN
    config = {**qwen3_config(), "model_type": model_type, layout: scaling}
    if model_type != "qwen3":
        config.pop("head_dim")
    folder = build_tiny_hybrid_model(tmp_path / "model", model_type, config=config)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f16")
    arch = {"qwen3": "qwen3", "qwen2": "qwen2", "llama": "llama"}[model_type]
    fields = {name: field.contents() for name, field in gguf.GGUFReader(str(path)).fields.items()}
    assert fields[f"{arch}.rope.scaling.type"] == "yarn"
    assert fields[f"{arch}.rope.scaling.factor"] == 4.0
    assert fields[f"{arch}.rope.scaling.original_context_length"] == 32
    assert fields[f"{arch}.rope.scaling.yarn_beta_fast"] == 32.0
    assert fields[f"{arch}.rope.scaling.yarn_beta_slow"] == 1.0
    assert fields[f"{arch}.rope.scaling.yarn_attn_factor"] == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"mscale": 0.707}, r"mscale=0\.707: mlx_lm's YaRN and llama.cpp's do not apply it alike"),
        ({"extrapolation_factor": 0.5}, r"extrapolation_factor=0\.5"),
        ({"mscale_all_dim": 0.707}, "llama.cpp reads it only for DeepSeek"),
    ],
)
def test_yarn_settings_mlx_lm_and_llama_cpp_read_apart_are_refused(extra: dict, message: str):
    from unsloth.mlx.gguf.convert import UnsupportedModel, rope_scaling

    with pytest.raises(UnsupportedModel, match=message):
        rope_scaling({"model_type": "qwen3", "rope_scaling": {**QWEN3_YARN, **extra}})
    assert rope_scaling({"model_type": "qwen3", "rope_scaling": {**QWEN3_YARN, "mscale": 1.0}})["rope_type"] == "yarn"


def test_yarn_outside_the_families_checked_against_llama_cpp_is_refused_by_name():
    from unsloth.mlx.gguf.convert import UnsupportedModel, rope_scaling

    with pytest.raises(UnsupportedModel, match=r"'yarn' .* yarn for (.*)\)") as refused:
        rope_scaling({"model_type": "phi3", "rope_scaling": QWEN3_YARN})
    listed = str(refused.value).rsplit("yarn for ", 1)[1].rstrip(")").split(", ")
    assert listed == sorted(listed)
    assert {"llama", "mistral", "qwen2", "qwen3", "gpt_oss"} <= set(listed) and "phi3" not in listed
    with pytest.raises(UnsupportedModel, match="mlx_lm's qwen3_moe builds a plain RoPE and ignores rope_scaling"):
        rope_scaling({"model_type": "qwen3_moe", "rope_scaling": QWEN3_YARN})


def _as_saved_by(folder: Path, tmp_path: Path, name: str, rope: dict) -> Path:
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        config.pop(key, None)
    config.update(rope)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "default"},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ],
    ids=["base-only", "llama3"],
)
def test_a_folder_saved_by_transformers_5_keeps_its_rope_base_and_scaling(tmp_path: Path, scaling: dict) -> None:
    """transformers 5 writes rope_theta and the scaling only inside rope_parameters; the older layout, with the same
    numbers at the top level, is what mlx_lm reads, so both must give the same logits."""
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model
    from unsloth import FastLanguageModel

    folder = build_tiny_mlx_model(tmp_path / "llama")
    theta = 500000.0
    older = {"rope_theta": theta, **({"rope_scaling": scaling} if scaling["rope_type"] != "default" else {})}
    newer = {"rope_parameters": {**scaling, "rope_theta": theta}}
    ids = mx.array([list(range(1, 60))])
    logits = {}
    for name, rope in (("older", older), ("newer", newer)):
        model, _ = FastLanguageModel.from_pretrained(str(_as_saved_by(folder, tmp_path, name, rope)))
        logits[name] = np.array(model(ids).astype(mx.float32))
    plain, _ = FastLanguageModel.from_pretrained(str(folder))
    assert not np.allclose(np.array(plain(ids).astype(mx.float32)), logits["older"], atol=1e-3)  # the base matters
    np.testing.assert_allclose(logits["newer"], logits["older"], atol=1e-6)
