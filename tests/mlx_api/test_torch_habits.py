"""Issue 46 item 5: torch habits on an MLX model. `next(model.parameters()).device` once raised "'dict' object is not
an iterator"; `parameters()` must still be MLX's tree for MLX's own code (optimizers, `mx.eval`, `update`)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from unsloth import UnslothTrainer


def test_parameters_iterate_as_torchs_and_stay_mlxs_tree(load_public) -> None:
    model, _ = load_public(lora=True)
    tree = model.parameters()
    flat = tree_flatten(tree)
    # MLX's own reading: a dict of dicts, flattened, evaluated and loaded back as before.
    own = nn.Module.parameters(model)
    assert isinstance(tree, dict) and tree.keys() == own.keys() and tree == own
    mx.eval(tree)
    model.update(tree)
    first = next(model.parameters())
    assert str(first.device) == "cpu" and first.device.type == "cpu"
    assert first.dtype == flat[0][1].dtype and first.shape == tuple(flat[0][1].shape)
    assert sum(parameter.numel() for parameter in model.parameters()) == sum(array.size for _, array in flat)
    trainable = sum(array.size for _, array in tree_flatten(model.trainable_parameters()))
    assert 0 < sum(p.numel() for p in model.parameters() if p.requires_grad) == trainable
    named = list(model.named_parameters())
    assert [name for name, _ in named] == [name for name, _ in flat]
    np.testing.assert_array_equal(np.asarray(named[0][1]), np.asarray(flat[0][1]))
    # A generator's manners: successive next() calls walk on.
    walk = model.parameters()
    assert next(walk).shape == tuple(flat[0][1].shape) and next(walk).shape == tuple(flat[1][1].shape)


def test_to_eval_train_and_dtype_answer_as_torchs(load_public) -> None:
    model, _ = load_public()
    assert model.to("cuda") is model and model.to("cpu") is model and model.cuda() is model
    assert model.dtype in (mx.float32, mx.bfloat16, mx.float16)
    assert model.to("cuda", mx.float16) is model and model.dtype == mx.float16
    assert all(array.dtype == mx.float16 for _, array in tree_flatten(model.parameters()))
    assert model.eval() is model and not model.training
    assert model.train() is model and model.training
    assert model.device == "cuda"


def test_a_model_with_torch_habits_still_trains(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public(lora=True)
    before = {name: np.asarray(array) for name, array in tree_flatten(model.trainable_parameters())}
    trainer = UnslothTrainer(model, quiet_args(max_steps=2), None, chat_rows, None, tokenizer)
    trainer.train()
    after = dict(tree_flatten(model.trainable_parameters()))
    assert any(not np.array_equal(before[name], np.asarray(after[name])) for name in before)


def test_setting_requires_grad_freezes_and_unfreezes_the_weight(load_public) -> None:
    model, _ = load_public(lora=True)
    name, parameter = next((name, p) for name, p in model.named_parameters() if p.requires_grad)
    parameter.requires_grad = False
    assert name not in dict(tree_flatten(model.trainable_parameters()))
    assert not dict(model.named_parameters())[name].requires_grad
    frozen_name = next(name for name, p in model.named_parameters() if not p.requires_grad and "norm" in name)
    dict(model.named_parameters())[frozen_name].requires_grad_(True)
    assert frozen_name in dict(tree_flatten(model.trainable_parameters()))
