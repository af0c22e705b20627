"""`get_peft_model(target_modules=...)` trains every name it is given or refuses it: `embed_tokens` / `lm_head` in
full (saved with the adapter, reloaded), LoRA in every block that has a name (hybrid LFM2 / Granite 4.0-H), MoE
experts through mlx_lm's SwitchLinear LoRA (gpt-oss), and a name matching nothing refused with the model's names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
NOTEBOOK_TARGETS = ATTENTION + ["gate_proj", "up_proj", "down_proj"]
# Mistral v0.3 CPT and LFM2.5 text completion: "Add for continual pretraining".
CPT_TARGETS = NOTEBOOK_TARGETS + ["embed_tokens", "lm_head"]
LFM2_TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"]
GRANITE_TARGETS = NOTEBOOK_TARGETS + ["shared_mlp.input_linear", "shared_mlp.output_linear"]
ROWS = [{"text": f"The kettle number {n} boils water for tea and the cup waits beside it."} for n in range(8)]


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untied model: embed_tokens and lm_head are two matrices."""
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    return build_tiny_mlx_model(tmp_path_factory.mktemp("mistral") / "model", architecture="mistral")


def _hybrid(tmp_path: Path, architecture: str, **config: Any) -> Path:
    from tools.kits.tiny_hybrid_model import HYBRID_CONFIGS, build_tiny_hybrid_model

    return build_tiny_hybrid_model(tmp_path / architecture, architecture, config=HYBRID_CONFIGS[architecture](**config))


def _weights(model: Any) -> dict:
    return {name: np.array(value) for name, value in tree_flatten(model.parameters())}


def _train(model: Any, tokenizer: Any, tmp_path: Path, steps: int = 2, **args: Any) -> Any:
    from unsloth import UnslothTrainer, UnslothTrainingArguments

    arguments = UnslothTrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        max_steps=steps,
        warmup_steps=0,
        learning_rate=3e-3,
        save_strategy="no",
        max_seq_length=32,
        **args,
    )
    trainer = UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=ROWS, args=arguments)
    trainer.train()
    return trainer


def _is_lora(module: Any) -> bool:
    return hasattr(module, "lora_a") and hasattr(module, "lora_b")


def test_embed_tokens_and_lm_head_in_targets_are_trained_in_full(mistral_dir: Path, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(mistral_dir))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=CPT_TARGETS, lora_alpha=16)
    before = _weights(model)
    _train(model, tokenizer, tmp_path)
    after = _weights(model)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert not np.array_equal(before[name], after[name]), f"{name} did not change"
    np.testing.assert_array_equal(before["model.norm.weight"], after["model.norm.weight"])  # not named: frozen


def test_print_trainable_parameters_counts_lora_and_the_full_matrices(mistral_dir: Path, capsys) -> None:
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(str(mistral_dir))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=CPT_TARGETS, lora_alpha=16)
    model.print_trainable_parameters()
    # Hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocabulary 512, two blocks: r * (in + out) per adapted linear.
    lora = 2 * 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128))
    full = 2 * 512 * 64
    base = sum(array.size for array in mx.load(str(mistral_dir / "model.safetensors")).values())
    trainable, total = lora + full, base + lora
    assert capsys.readouterr().out.strip() == (
        f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {100 * trainable / total:.4f}"
    )


def test_embedding_learning_rate_sets_the_embeddings_step(mistral_dir: Path, tmp_path: Path) -> None:
    """One AdamW step moves each weight by about its learning rate: the embeddings' by embedding_learning_rate."""
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(mistral_dir))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=CPT_TARGETS, lora_alpha=16)
    before = _weights(model)
    _train(model, tokenizer, tmp_path, steps=1, embedding_learning_rate=1e-4, weight_decay=0.0)
    after = _weights(model)
    embed_step = np.abs(after["model.embed_tokens.weight"] - before["model.embed_tokens.weight"]).max()
    head_step = np.abs(after["lm_head.weight"] - before["lm_head.weight"]).max()
    lora_step = np.abs(after["model.layers.0.self_attn.q_proj.lora_b"]).max()
    assert embed_step == pytest.approx(1e-4, rel=0.05) and head_step == pytest.approx(1e-4, rel=0.05)
    assert lora_step == pytest.approx(3e-3, rel=0.05)


def test_trained_embeddings_are_saved_with_the_adapter_and_reloaded(mistral_dir: Path, tmp_path: Path) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(mistral_dir))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=CPT_TARGETS, lora_alpha=16)
    _train(model, tokenizer, tmp_path)
    model.save_pretrained(str(tmp_path / "adapter"))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    saved = mx.load(str(tmp_path / "adapter" / "adapters.safetensors"))
    assert config["modules_to_save"] == ["embed_tokens", "lm_head"]
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(saved)
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "adapter"))
    trained, back = _weights(model), _weights(reloaded)
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.down_proj.lora_b"):
        np.testing.assert_array_equal(back[name], trained[name])
    tokens = mx.array([[5, 9, 17, 33]])
    np.testing.assert_allclose(np.array(reloaded(tokens)), np.array(model(tokens)), atol=1e-5)


def test_a_four_bit_base_trains_its_embeddings_unquantized(mistral_dir: Path, tmp_path: Path) -> None:
    """As bitsandbytes leaves them, embed_tokens and lm_head are trained in floating point over a 4-bit base."""
    import mlx.nn as nn

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(mistral_dir), load_in_4bit=True)
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=CPT_TARGETS, lora_alpha=16)
    assert type(model.model.embed_tokens) is nn.Embedding and type(model.lm_head) is nn.Linear
    assert isinstance(model.model.layers[0].self_attn.q_proj.linear, nn.QuantizedLinear)
    before = np.array(model.model.embed_tokens.weight)
    _train(model, tokenizer, tmp_path)
    assert not np.array_equal(before, np.array(model.model.embed_tokens.weight))
    model.save_pretrained(str(tmp_path / "adapter"))
    reloaded, _ = FastLanguageModel.from_pretrained(str(tmp_path / "adapter"))
    tokens = mx.array([[5, 9, 17, 33]])
    np.testing.assert_allclose(np.array(reloaded(tokens)), np.array(model(tokens)), atol=1e-5)


def test_lfm2_gets_lora_in_every_attention_block(tmp_path: Path) -> None:
    """LFM2 opens with a convolution block; the attention blocks after it still get their LoRA, and train."""
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(_hybrid(tmp_path, "lfm2")))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=LFM2_TARGETS, lora_alpha=16)
    attention = [index for index, block in enumerate(model.layers) if block.is_attention_layer]
    assert attention == [1, 3]
    _train(model, tokenizer, tmp_path)
    for index, block in enumerate(model.layers):
        adapted = [block.self_attn.q_proj, block.self_attn.out_proj] if index in attention else [block.conv.in_proj]
        adapted.append(block.feed_forward.w2)
        for module in adapted:
            assert _is_lora(module) and np.abs(np.array(module.lora_b)).max() > 0, (index, module)


@pytest.mark.parametrize("moe", [True, False], ids=["h-tiny-moe", "h-micro-dense"])
def test_granite_notebook_targets_reach_every_block(tmp_path: Path, moe: bool) -> None:
    """The Granite 4.0 notebook's list: attention in the attention block, the shared MLP (mlx_lm's mlp.* in the
    dense variant, which its loader renames) and the experts in every block."""
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(_hybrid(tmp_path, "granitemoehybrid", moe=moe)))
    model = FastLanguageModel.get_peft_model(model, r=8, target_modules=GRANITE_TARGETS, lora_alpha=16)
    _train(model, tokenizer, tmp_path)
    assert _is_lora(model.layers[1].self_attn.q_proj) and _is_lora(model.layers[1].self_attn.o_proj)
    assert not _is_lora(model.layers[0].mamba.in_proj)  # not named, so not adapted
    for block in model.layers:
        if moe:
            assert _is_lora(block.shared_mlp.input_linear) and _is_lora(block.shared_mlp.output_linear)
            experts = block.block_sparse_moe.switch_mlp
            assert all(isinstance(experts[name], LoRASwitchLinear) for name in ("gate_proj", "up_proj", "down_proj"))
            assert np.abs(np.array(experts.down_proj.lora_b)).max() > 0
        else:
            assert all(_is_lora(block.mlp[name]) for name in ("gate_proj", "up_proj", "down_proj"))
            assert np.abs(np.array(block.mlp.down_proj.lora_b)).max() > 0


def test_gpt_oss_experts_get_lora_and_merge(tmp_path: Path) -> None:
    """gate_proj / up_proj / down_proj name gpt-oss's experts, which train per expert and fold into the merge."""
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    folder = _hybrid(tmp_path, "gpt_oss")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    model = FastLanguageModel.get_peft_model(model, r=4, target_modules=NOTEBOOK_TARGETS, lora_alpha=8)
    experts = model.layers[0].mlp.experts
    assert all(isinstance(experts[name], LoRASwitchLinear) for name in ("gate_proj", "up_proj", "down_proj"))
    _train(model, tokenizer, tmp_path)
    assert np.abs(np.array(experts.up_proj.lora_b)).max() > 0
    merged = model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_32bit")
    base = mx.load(str(folder / "model.safetensors"))
    fused = mx.load(str(merged / "model.safetensors"))
    name = "model.layers.0.mlp.experts.up_proj.weight"
    assert fused[name].shape == base[name].shape and not np.allclose(np.array(fused[name]), np.array(base[name]))


def test_a_name_matching_nothing_is_refused_with_the_models_names(mistral_dir: Path) -> None:
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(str(mistral_dir))
    with pytest.raises(ValueError, match=r"target_modules: 'bogus_proj' matches nothing") as refusal:
        FastLanguageModel.get_peft_model(model, target_modules=["q_proj", "bogus_proj"])
    assert "q_proj" in str(refusal.value) and "embed_tokens" in str(refusal.value)
    # Nothing half-done: no LoRA layer, nothing frozen.
    assert not any(_is_lora(module) for _, module in model.named_modules())
    assert len(tree_flatten(model.trainable_parameters())) == len(tree_flatten(model.parameters()))


def test_the_default_list_adapts_what_the_family_has(tmp_path: Path) -> None:
    """Without target_modules the usual projections are adapted where they exist (LFM2 has q/k/v_proj only)."""
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(str(_hybrid(tmp_path, "lfm2")))
    model = FastLanguageModel.get_peft_model(model, r=8)
    assert _is_lora(model.layers[3].self_attn.v_proj) and not _is_lora(model.layers[3].self_attn.out_proj)


def test_modules_to_save_accepts_the_embeddings_only(mistral_dir: Path) -> None:
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(str(mistral_dir))
    with pytest.raises(NotImplementedError, match=r"modules_to_save=\['norm'\]"):
        FastLanguageModel.get_peft_model(model, target_modules=ATTENTION, modules_to_save=["norm"])
    model = FastLanguageModel.get_peft_model(model, target_modules=ATTENTION, modules_to_save=["embed_tokens"])
    trainable = {name for name, _ in tree_flatten(model.trainable_parameters())}
    assert "model.embed_tokens.weight" in trainable and "lm_head.weight" not in trainable
