"""`get_peft_model(qat_scheme="int4")` trains against MLX's own 4-bit quantization (affine, groups of 128, as torchao's
Int4WeightOnlyConfig(group_size=128)), the gradient passing straight through the rounding; the QAT notebook's
`quantize_(model, QATConfig(step="convert"))` and `save_pretrained_torchao` then give the MLX-quantized model.

The check the issue asks for: the QAT-trained adapter, merged and quantized, scores a lower loss on its training rows
than the same adapter trained without QAT and then quantized the same way. `"int8-int4"` (and its other name
`"phone-deployment"`) is checked the same way against a quantization written here from torchao's definitions: int4
weights symmetric in groups of 32, each token's activations int8 asymmetric, the embedding int8 symmetric per row;
`"int8"` holds one symmetric scale per weight row. The fp8 schemes are refused by name with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

from .conftest import chat_text

GROUP = 128
STEPS = 30
LEARNING_RATE = 1e-2
FACTS = [
    ("What colour is the kettle?", "The kettle is red."),
    ("Where do bees carry pollen?", "Bees carry pollen to the hive."),
    ("How many times does the river bend?", "The river bends twice."),
    ("What does the lighthouse blink?", "The lighthouse blinks green."),
]


# One weight per group of 128 this many standard deviations out, as trained LLMs' weights have outliers: a group's
# range then spans 16 levels coarsely, which is what costs a real model its precision in int4.
OUTLIER_SIGMAS = 20.0


@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama whose every projection is 128 or 256 wide, so int4's groups of 128 cover them all, with an
    outlier weight in each group of each projection."""
    import mlx.core as mx

    from tools.kits.tiny_mlx_model import TinyLlamaShape, build_tiny_mlx_model

    root = tmp_path_factory.mktemp("tiny-llama-128")
    shape = TinyLlamaShape(hidden_size=128, intermediate_size=256)
    folder = build_tiny_mlx_model(root / "model", shape, tokenizer_cache_dir=root / "tokenizers")
    weights = mx.load(str(folder / "model.safetensors"))
    for name, weight in weights.items():
        if name.endswith("proj.weight"):
            outliers = mx.zeros(weight.shape)
            outliers[:, ::GROUP] = OUTLIER_SIGMAS * weight.std()
            weights[name] = weight + outliers.astype(weight.dtype)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder


@pytest.fixture(scope="module")
def plain_trained(wide_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The adapter trained without QAT, which each scheme's check quantizes its own way."""
    return _trained(wide_model_dir, tmp_path_factory.mktemp("plain"))


def _rows() -> List[dict]:
    return [{"text": chat_text(question, answer)} for question, answer in FACTS]


def _trained(folder: Path, tmp_path: Path, steps: int = STEPS, load: Any = None, **peft: Any) -> tuple:
    """LoRA trained on the rows; with `load` (from_pretrained's keywords), a full fine-tune instead."""
    from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments

    model, tokenizer = FastLanguageModel.from_pretrained(str(folder), load_in_4bit=False, **(load or {}))
    if load is None:
        model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0, **peft)
    args = UnslothTrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_steps=steps,
        warmup_steps=0,
        learning_rate=LEARNING_RATE,
        save_strategy="no",
        max_seq_length=64,
        logging_steps=1,
    )
    UnslothTrainer(model, tokenizer, _rows(), args=args).train()
    return model, tokenizer


def _mean_loss(model: Any, tokenizer: Any) -> float:
    """Mean next-token cross-entropy over every token of the training rows."""
    import mlx.core as mx
    import mlx.nn as nn

    losses = []
    for row in _rows():
        ids = mx.array([tokenizer(row["text"])["input_ids"]])
        logits = model(ids[:, :-1]).astype(mx.float32)
        losses.append(nn.losses.cross_entropy(logits, ids[:, 1:], reduction="mean").item())
    return float(np.mean(losses))


def _quantized_by_hand(model: Any, tokenizer: Any, folder: Path) -> Any:
    """The adapter merged in float, then every projection quantized to affine 4-bit in groups of 128."""
    import mlx.nn as nn
    from mlx_lm import load

    model.save_pretrained_merged(str(folder), tokenizer, save_method="merged_32bit")
    merged, _ = load(str(folder))
    nn.quantize(
        merged,
        group_size=GROUP,
        bits=4,
        class_predicate=lambda path, module: isinstance(module, nn.Linear) and module.weight.shape[-1] % GROUP == 0,
    )
    return merged


def test_qat_adapter_merged_and_quantized_beats_one_trained_without_qat(
    wide_model_dir: Path, plain_trained: tuple, tmp_path: Path
) -> None:
    import mlx.core as mx
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    plain, tokenizer = plain_trained
    plain_loss = _mean_loss(_quantized_by_hand(plain, tokenizer, tmp_path / "plain-merged"), tokenizer)

    qat, _ = _trained(wide_model_dir, tmp_path / "qat", qat_scheme="int4")
    assert any("FakeQuantized" in type(module).__name__ for module in qat.modules())  # the notebook's check cell
    by_hand = _quantized_by_hand(qat, tokenizer, tmp_path / "qat-merged")
    quantize_(qat, QATConfig(step="convert"))
    assert not any("FakeQuantized" in type(module).__name__ for module in qat.modules())
    assert type(qat.layers[0].self_attn.q_proj).__name__ == "QuantizedLinear"
    assert (qat.layers[0].mlp.down_proj.bits, qat.layers[0].mlp.down_proj.group_size) == (4, GROUP)
    # The converted model is the QAT adapter merged, then quantized.
    ids = mx.array([tokenizer(_rows()[0]["text"])["input_ids"]])
    np.testing.assert_allclose(np.array(qat(ids)), np.array(by_hand(ids)), atol=2e-3)
    qat_loss = _mean_loss(qat, tokenizer)
    print(f"merged and quantized to int4: QAT {qat_loss:.4f}, without QAT {plain_loss:.4f}")
    assert qat_loss < plain_loss, (qat_loss, plain_loss)


def test_save_pretrained_torchao_writes_the_mlx_quantized_model(wide_model_dir: Path, tmp_path: Path) -> None:
    """The notebook's order: convert, the adapter's save_pretrained (CUDA's peft model still holds the adapter after
    convert), then save_pretrained_torchao."""
    import mlx.core as mx
    from mlx_lm import load
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    from unsloth import FastLanguageModel

    model, tokenizer = _trained(wide_model_dir, tmp_path, steps=2, qat_scheme="int4")
    trained_b = np.array(model.layers[0].self_attn.q_proj.lora_b)
    quantize_(model, QATConfig(step="convert"))
    model.save_pretrained(str(tmp_path / "qwen_lora"))
    assert "quantization" not in json.loads((tmp_path / "qwen_lora" / "adapter_config.json").read_text())
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "qwen_lora"))
    np.testing.assert_array_equal(np.array(reloaded.layers[0].self_attn.q_proj.lora_b), trained_b)
    model.save_pretrained_torchao(str(tmp_path / "model"), tokenizer)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["quantization"] == {"bits": 4, "group_size": GROUP}
    loaded, _ = load(str(tmp_path / "model"))
    assert type(loaded.layers[1].mlp.up_proj).__name__ == "QuantizedLinear"
    ids = mx.array([tokenizer("The kettle is red.")["input_ids"]])
    np.testing.assert_allclose(np.array(loaded(ids)), np.array(model(ids)), atol=1e-4)


# ---- int8-int4: torchao's Int8DynamicActivationIntxWeightConfig(int4, PerGroup(32)), written out by hand ----------

INT4_GROUP = 32


def _symmetric(weight: np.ndarray, bits: int, group: int) -> np.ndarray:
    """torchao's symmetric grid: scale max|w| / ((2**bits - 1) / 2) per group, codes clipped to the signed range."""
    grouped = weight.reshape(weight.shape[0], -1, group)
    scale = np.maximum(np.abs(grouped).max(axis=-1, keepdims=True) / ((2**bits - 1) / 2), np.finfo(np.float32).eps)
    codes = np.clip(np.round(grouped / scale), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return (codes * scale).reshape(weight.shape).astype(np.float32)


def _int8_per_token(x: Any) -> Any:
    """torchao's dynamic asymmetric per-token int8: the range widened to hold zero, zero mapped exactly."""
    import mlx.core as mx

    low = mx.minimum(x.min(axis=-1, keepdims=True), 0.0)
    high = mx.maximum(x.max(axis=-1, keepdims=True), 0.0)
    scale = mx.maximum((high - low) / 255.0, float(np.finfo(np.float32).eps))
    zero = mx.clip(-128 - mx.round(low / scale), -128, 127)
    return (mx.clip(mx.round(x / scale) + zero, -128, 127) - zero) * scale


def _int8_int4_by_hand(model: Any, tokenizer: Any, folder: Path) -> Any:
    """The adapter merged in float, then every projection int8-int4 and the (tied) embedding int8 per row."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_unflatten
    from mlx_lm import load

    class ByHand(nn.Module):
        def __init__(self, weight: np.ndarray) -> None:
            super().__init__()
            self.weight = mx.array(_symmetric(weight, 4, INT4_GROUP))

        def __call__(self, x: Any) -> Any:
            return _int8_per_token(x) @ self.weight.T

    model.save_pretrained_merged(str(folder), tokenizer, save_method="merged_32bit")
    merged, _ = load(str(folder))
    projections = [(path, module) for path, module in merged.named_modules() if path.endswith("_proj")]
    merged.update_modules(tree_unflatten([(path, ByHand(np.array(module.weight))) for path, module in projections]))
    embedding = np.array(merged.model.embed_tokens.weight)
    merged.model.embed_tokens.weight = mx.array(_symmetric(embedding, 8, embedding.shape[-1]))
    return merged


def test_int8_int4_qat_adapter_merged_and_quantized_beats_one_trained_without_qat(
    wide_model_dir: Path, plain_trained: tuple, tmp_path: Path
) -> None:
    import mlx.core as mx
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    plain, tokenizer = plain_trained
    plain_loss = _mean_loss(_int8_int4_by_hand(plain, tokenizer, tmp_path / "plain-merged"), tokenizer)

    qat, _ = _trained(wide_model_dir, tmp_path / "qat", qat_scheme="int8-int4")
    assert type(qat.model.embed_tokens).__name__ == "FakeQuantizedEmbedding"
    by_hand = _int8_int4_by_hand(qat, tokenizer, tmp_path / "qat-merged")
    inputs = {
        path: mx.random.normal((3, module.weight.shape[1]), key=mx.random.key(len(path)))
        for path, module in by_hand.named_modules()
        if path.endswith("_proj")
    }
    # What each layer computed while training, to compare with the by-hand scheme below.
    trained = {path: np.array(dict(qat.named_modules())[path](x)) for path, x in inputs.items()}
    quantize_(qat, QATConfig(step="convert"))
    down = qat.layers[0].mlp.down_proj
    assert (type(down).__name__, down.bits, down.group_size, down.activation_bits) == (
        "ActivationQuantizedLinear",
        4,
        INT4_GROUP,
        8,
    )
    assert (type(qat.model.embed_tokens).__name__, qat.model.embed_tokens.bits) == ("QuantizedEmbedding", 8)
    # Each layer, as it trained and as converted, computes what the scheme written out by hand computes with the QAT
    # adapter merged. Layer by layer: through the whole model a last-bit difference flips an activation code, and grows.
    converted, written = dict(qat.named_modules()), dict(by_hand.named_modules())
    for path, x in inputs.items():
        expected = np.array(written[path](x))
        np.testing.assert_allclose(trained[path], expected, atol=1e-4, err_msg=f"trained {path}")
        np.testing.assert_allclose(np.array(converted[path](x)), expected, atol=1e-4, err_msg=f"converted {path}")
    ids = mx.array([tokenizer(_rows()[0]["text"])["input_ids"]])
    np.testing.assert_allclose(
        np.array(qat.model.embed_tokens(ids)), np.array(by_hand.model.embed_tokens(ids)), atol=1e-6
    )
    qat_loss = _mean_loss(qat, tokenizer)
    print(f"merged and quantized to int8-int4: QAT {qat_loss:.4f}, without QAT {plain_loss:.4f}")
    assert qat_loss < plain_loss, (qat_loss, plain_loss)


def test_phone_deployment_trains_as_int8_int4(wide_model_dir: Path, tmp_path: Path) -> None:
    import mlx.core as mx
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    ids = mx.array([[5, 9, 17, 33]])
    logits = {}
    for scheme in ("int8-int4", "phone-deployment"):
        model, _ = _trained(wide_model_dir, tmp_path / scheme, steps=2, qat_scheme=scheme)
        quantize_(model, QATConfig(step="convert"))
        assert type(model.layers[1].self_attn.o_proj).__name__ == "ActivationQuantizedLinear"
        logits[scheme] = np.array(model(ids))
    np.testing.assert_array_equal(logits["phone-deployment"], logits["int8-int4"])


def test_save_pretrained_torchao_keeps_int8_activations(wide_model_dir: Path, tmp_path: Path) -> None:
    """mlx_lm loads the int8-int4 model with its int4 weights and int8 embedding rows; `from_pretrained` also
    restores the per-token int8 activations, so the reloaded model answers as the converted one."""
    import mlx.core as mx
    from mlx_lm import load

    from unsloth import FastLanguageModel

    model, tokenizer = _trained(wide_model_dir, tmp_path, steps=2, qat_scheme="int8-int4")
    model.save_pretrained_torchao(str(tmp_path / "model"), tokenizer)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["quantization"] == {
        "group_size": INT4_GROUP,
        "bits": 4,
        "model.embed_tokens": {"group_size": 128, "bits": 8},
    }
    assert config["unsloth_activation_quantization"] == {"bits": 8, "granularity": "per_token", "symmetric": False}
    ids = mx.array([tokenizer("The kettle is red.")["input_ids"]])
    weights_only, _ = load(str(tmp_path / "model"))
    assert type(weights_only.layers[1].mlp.up_proj).__name__ == "QuantizedLinear"
    assert weights_only.model.embed_tokens.bits == 8
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "model"))
    assert type(reloaded.layers[1].mlp.up_proj).__name__ == "ActivationQuantizedLinear"
    np.testing.assert_allclose(np.array(reloaded(ids)), np.array(model(ids)), atol=1e-4)


def test_int8_trains_and_saves_one_symmetric_scale_per_row(wide_model_dir: Path, tmp_path: Path) -> None:
    """CUDA Unsloth's "int8" (torchao's IntxWeightOnlyConfig(int8, PerAxis(0))): each converted projection holds
    the merged weight quantized by hand with one symmetric scale per row, and mlx_lm loads the saved model."""
    import mlx.core as mx
    from mlx_lm import load
    from torchao.quantization import quantize_
    from torchao.quantization.qat import QATConfig

    model, tokenizer = _trained(wide_model_dir, tmp_path, steps=2, qat_scheme="int8")
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_32bit")
    merged, _ = load(str(tmp_path / "merged"))
    quantize_(model, QATConfig(step="convert"))
    converted = dict(model.named_modules())
    for path, module in merged.named_modules():
        if path.endswith("_proj"):
            layer = converted[path]
            weight = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=layer.group_size, bits=8)
            by_hand = _symmetric(np.array(module.weight), 8, module.weight.shape[-1])
            np.testing.assert_allclose(np.array(weight), by_hand, atol=1e-6, err_msg=path)
    model.save_pretrained_torchao(str(tmp_path / "model"), tokenizer)
    loaded, _ = load(str(tmp_path / "model"))
    ids = mx.array([tokenizer("The kettle is red.")["input_ids"]])
    np.testing.assert_allclose(np.array(loaded(ids)), np.array(model(ids)), atol=1e-4)


def test_phone_deployment_notebook_full_finetune(wide_model_dir: Path, tmp_path: Path) -> None:
    """The phone-deployment notebook's cells: `from_pretrained(full_finetuning=True, qat_scheme="phone-deployment")`,
    training, then `save_pretrained_torchao`; every weight trains fake-quantized, as CUDA Unsloth's full-finetune QAT."""
    import mlx.core as mx

    from unsloth import FastLanguageModel

    with pytest.raises(ValueError, match=r"only compatible with `full_finetuning=True`"):
        FastLanguageModel.from_pretrained(str(wide_model_dir), qat_scheme="phone-deployment")
    untrained = mx.load(str(wide_model_dir / "model.safetensors"))["model.layers.0.mlp.down_proj.weight"]
    load = {"full_finetuning": True, "qat_scheme": "phone-deployment"}
    model, tokenizer = _trained(wide_model_dir, tmp_path, steps=2, load=load)
    assert type(model.layers[0].mlp.down_proj).__name__ == "FakeQuantizedLinear"
    assert not np.array_equal(np.array(model.layers[0].mlp.down_proj.weight), np.array(untrained))
    model.save_pretrained_torchao(str(tmp_path / "phone_model"), tokenizer=tokenizer)
    config = json.loads((tmp_path / "phone_model" / "config.json").read_text())
    assert config["quantization"]["bits"] == 4 and config["unsloth_activation_quantization"]["bits"] == 8
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "phone_model"))
    assert type(reloaded.layers[0].mlp.down_proj).__name__ == "ActivationQuantizedLinear"
    ids = mx.array([tokenizer("The kettle is red.")["input_ids"]])
    np.testing.assert_allclose(np.array(reloaded(ids)), np.array(model(ids)), atol=1e-4)


def test_gemma3_switches_int8_int4_to_int4_as_cuda_unsloth_does(tmp_path: Path, capsys: Any) -> None:
    from tools.kits.tiny_mlx_model import TinyLlamaShape, build_tiny_mlx_model
    from unsloth import FastLanguageModel

    shape = TinyLlamaShape(hidden_size=128, intermediate_size=256)
    folder = build_tiny_mlx_model(tmp_path / "gemma3", shape, architecture="gemma3_text", tokenizer_cache_dir=tmp_path)
    model, _ = FastLanguageModel.from_pretrained(str(folder))
    model = FastLanguageModel.get_peft_model(model, r=8, qat_scheme="int8-int4")
    assert "Gemma3 has a large vocabulary" in capsys.readouterr().out
    assert type(model.model.embed_tokens).__name__ == "Embedding"
    assert model.unsloth_qat_scheme.name == "int4"


@pytest.mark.parametrize("scheme", ["fp8-int4", "fp8-fp8"])
def test_fp8_schemes_are_refused_with_the_reason(load_public, scheme: str) -> None:
    from unsloth import FastLanguageModel

    model, _ = load_public()
    with pytest.raises(NotImplementedError, match=rf"qat_scheme='{scheme}' on MLX: it rounds to fp8 e4m3"):
        FastLanguageModel.get_peft_model(model, r=8, qat_scheme=scheme)


def test_qat_on_a_quantized_base_and_an_unknown_scheme_are_refused(load_public) -> None:
    from unsloth import FastLanguageModel

    model, _ = load_public(load_in_4bit=True)
    with pytest.raises(NotImplementedError, match=r"qat_scheme='int4' with a load_in_4bit=True base"):
        FastLanguageModel.get_peft_model(model, r=8, qat_scheme="int4")
    model, _ = load_public()
    with pytest.raises(ValueError, match=r"qat_scheme='int3' is not one of int4"):
        FastLanguageModel.get_peft_model(model, r=8, qat_scheme="int3")
