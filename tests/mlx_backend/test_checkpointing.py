"""Gradient checkpointing: the same loss and gradients as keeping every activation, at a lower peak memory."""

from __future__ import annotations

from typing import Any, Tuple

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import llama
from mlx_lm.tuner.utils import linear_to_lora_layers

from unsloth_zoo.mlx.checkpointing import (
    MODEL_ATTRIBUTE,
    disable_gradient_checkpointing,
    enable_gradient_checkpointing,
    gradient_checkpointing,
    is_checkpointed,
    transformer_blocks,
    wants_gradient_checkpointing,
)


def lora_llama(layers: int, hidden: int = 64, dropout: float = 0.0) -> Any:
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=2 * hidden,
        num_attention_heads=4,
        rms_norm_eps=1e-5,
        vocab_size=256,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    mx.random.seed(0)
    model = llama.Model(args)
    model.freeze()
    linear_to_lora_layers(model, layers, {"rank": 8, "scale": 2.0, "dropout": dropout})
    # LoRA's B starts at zero, which would hide dropout from the loss; random B makes every mask count.
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    mx.eval(model.parameters())
    return model


def next_token_loss(model: Any, tokens: mx.array) -> mx.array:
    return nn.losses.cross_entropy(model(tokens[:, :-1]), tokens[:, 1:]).mean()


def loss_and_grads(model: Any, tokens: mx.array, seed: int = 7) -> Tuple[float, dict]:
    mx.random.seed(seed)
    loss, grads = nn.value_and_grad(model, next_token_loss)(model, tokens)
    mx.eval(loss, grads)
    return loss.item(), dict(tree_flatten(grads))


def largest_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys() and first
    return max(mx.abs(first[name] - second[name]).max().item() for name in first)


def tokens(width: int) -> mx.array:
    return mx.random.randint(0, 256, (2, width + 1), key=mx.random.key(1))


def test_loss_and_gradients_are_those_of_the_plain_blocks() -> None:
    model = lora_llama(4)
    batch = tokens(64)
    plain_loss, plain_grads = loss_and_grads(model, batch)
    enable_gradient_checkpointing(model)
    assert all(is_checkpointed(block) for block in model.layers)
    loss, grads = loss_and_grads(model, batch)
    assert abs(loss - plain_loss) <= 1e-6
    assert largest_difference(grads, plain_grads) <= 1e-6


def test_dropout_draws_the_same_masks_when_the_backward_pass_recomputes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = lora_llama(3, dropout=0.3)
    batch = tokens(32)
    enable_gradient_checkpointing(model)
    loss, grads = loss_and_grads(model, batch)
    # The reference runs the same checkpointed blocks with mlx's recomputation taken away, so every mask is drawn once.
    monkeypatch.setattr(mx, "checkpoint", lambda function: function)
    reference_loss, reference_grads = loss_and_grads(model, batch)
    assert abs(loss - reference_loss) <= 1e-6
    assert largest_difference(grads, reference_grads) <= 1e-6


def test_a_step_peaks_lower_with_checkpointing() -> None:
    model = lora_llama(12, hidden=128)
    batch = tokens(512)[:1]

    def step_peak() -> int:
        loss_and_grads(model, batch)
        mx.reset_peak_memory()
        loss_and_grads(model, batch)
        return mx.get_peak_memory()

    kept = step_peak()
    enable_gradient_checkpointing(model)
    recomputed = step_peak()
    assert recomputed < kept / 2, (recomputed / 2**20, kept / 2**20)


def test_enabling_twice_changes_nothing_and_disabling_restores_the_blocks() -> None:
    model = lora_llama(2)
    plain = type(model.layers[0])
    assert enable_gradient_checkpointing(model) == 2
    checkpointed = type(model.layers[0])
    assert checkpointed is not plain and isinstance(model.layers[0], plain)
    enable_gradient_checkpointing(model)
    assert type(model.layers[0]) is checkpointed and checkpointed.__mro__[1] is plain
    disable_gradient_checkpointing(model)
    assert type(model.layers[0]) is plain and not is_checkpointed(model.layers[1])


def test_the_context_leaves_the_model_as_it_found_it() -> None:
    model = lora_llama(2)
    with gradient_checkpointing(model, True):
        assert all(is_checkpointed(block) for block in model.layers)
    assert not any(is_checkpointed(block) for block in model.layers)
    enable_gradient_checkpointing(model)
    with gradient_checkpointing(model, True):
        pass
    assert all(is_checkpointed(block) for block in model.layers)
    with gradient_checkpointing(model, False):
        assert all(is_checkpointed(block) for block in model.layers)


def test_blocks_are_the_decoder_layers_only() -> None:
    model = lora_llama(3)
    assert transformer_blocks(model) == list(model.layers)


def test_a_model_without_blocks_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="Linear has no list of transformer blocks"):
        enable_gradient_checkpointing(nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("on_model", "in_args", "expected"),
    [
        (None, False, False),
        ("unsloth", False, True),
        (True, False, True),
        (False, True, True),
        (False, "unsloth", True),
    ],
)
def test_the_model_or_the_arguments_ask_for_it(on_model: Any, in_args: Any, expected: bool) -> None:
    model = lora_llama(1)
    if on_model is not None:
        setattr(model, MODEL_ATTRIBUTE, on_model)
    assert wants_gradient_checkpointing(model, in_args) is expected


def test_an_unknown_value_is_refused() -> None:
    with pytest.raises(ValueError, match="True, False or 'unsloth', got 'offload'"):
        wants_gradient_checkpointing(lora_llama(1), "offload")


def test_the_trainer_checkpoints_during_training_only(load_tiny, tmp_path) -> None:
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig

    seen = []

    class BlockWatcher:
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            seen.append(all(is_checkpointed(block) for block in model.layers))

    losses = {}
    for checkpointing in (False, True):
        model, tokenizer = load_tiny(lora=True)
        config = MLXTrainingConfig(
            per_device_train_batch_size=2,
            gradient_accumulation_steps=1,
            max_steps=3,
            warmup_steps=0,
            save_strategy="no",
            output_dir=str(tmp_path / str(checkpointing)),
            gradient_checkpointing=checkpointing,
        )
        rows = [{"text": f"row {index} says hello to the checkpointed blocks"} for index in range(6)]
        trainer = MLXTrainer(model, tokenizer, rows, args=config, callbacks=[BlockWatcher()])
        trainer.train()
        losses[checkpointing] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert not any(is_checkpointed(block) for block in model.layers)
    assert seen == [False] * 3 + [True] * 3
    assert losses[True] == pytest.approx(losses[False], abs=1e-6)
