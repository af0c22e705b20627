"""Real training on a tiny random-weight llama: loss, totals, schedules, clipping, checkpoints, resume, saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlx_test_kit import EventRecorder, text_rows


def flat_parameters(model) -> dict:
    import numpy as np
    from mlx.utils import tree_flatten

    return {name: np.array(array) for name, array in tree_flatten(model.parameters())}


def logged(trainer, key: str) -> list:
    return [entry[key] for entry in trainer.state.log_history if key in entry and "train_runtime" not in entry]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_loss_falls_on_a_memorisable_dataset(load_tiny, config, memorise_rows, lora):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=lora)
    # LoRA's few parameters need a larger, constant rate to memorise in the same 30 steps.
    schedule = {"learning_rate": 2e-2, "lr_scheduler_type": "constant"} if lora else {"learning_rate": 3e-3}
    args = config(per_device_train_batch_size=4, max_steps=30, logging_steps=5, **schedule)
    trainer = MLXTrainer(model, tokenizer, memorise_rows, args=args)
    output = trainer.train()

    losses = logged(trainer, "loss")
    assert output.global_step == 30
    assert output.metrics["train_loss"] == pytest.approx(output.training_loss)
    assert {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_tokens_per_second"} <= set(
        output.metrics
    )
    # A random 512-token model starts near ln(512) = 6.2 nats; memorising eight short lines takes it far below.
    assert losses[0] > 5.0
    assert losses[-1] < (2.0 if lora else 1.5)
    assert output.training_loss < losses[0]


def test_loss_curve_falls_and_the_dataset_path_matches_the_list_path(load_tiny, config, memorise_rows):
    import datasets

    from unsloth_zoo.mlx import MLXTrainer

    curves = []
    for rows in (memorise_rows, datasets.Dataset.from_list(memorise_rows)):
        model, tokenizer = load_tiny()
        trainer = MLXTrainer(model, tokenizer, rows, args=config(per_device_train_batch_size=4, max_steps=20))
        trainer.train()
        curves.append(logged(trainer, "loss"))
    first, last = curves[0][0], curves[0][-1]
    assert first > 5.0 and last < 2.5
    assert curves[1] == pytest.approx(curves[0], rel=1e-5)


def test_lora_trains_only_adapters_and_saves_what_mlx_lm_loads(load_tiny, config, memorise_rows, tiny_model_dir):
    import mlx.core as mx
    import numpy as np
    from mlx_lm import load

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    before = flat_parameters(model)
    args = config(max_steps=5, learning_rate=1e-2)
    MLXTrainer(model, tokenizer, memorise_rows, args=args).train()
    after = flat_parameters(model)

    changed = sorted(name for name in before if not np.array_equal(before[name], after[name]))
    assert changed and all(name.endswith(("lora_a", "lora_b")) for name in changed)
    assert any(name.endswith("lora_b") for name in changed)

    output_dir = Path(args.output_dir)
    saved = mx.load(str(output_dir / "adapters.safetensors"))
    assert set(saved) == {name for name in before if name.endswith(("lora_a", "lora_b"))}
    adapter_config = json.loads((output_dir / "adapter_config.json").read_text())
    assert adapter_config["fine_tune_type"] == "lora" and adapter_config["lora_parameters"]["scale"] == 2.0

    reloaded, _ = load(str(tiny_model_dir), adapter_path=str(output_dir))
    probe = mx.array([[5, 40, 90, 7]])
    model.eval()
    assert np.allclose(np.array(reloaded(probe)), np.array(model(probe)), atol=1e-5)


def test_full_fine_tune_saves_a_folder_that_loads_back(load_tiny, config, memorise_rows):
    import mlx.core as mx
    import numpy as np

    from unsloth_zoo.mlx import MLXTrainer, load_model

    model, tokenizer = load_tiny()
    before = flat_parameters(model)
    args = config(max_steps=3)
    MLXTrainer(model, tokenizer, memorise_rows, args=args).train()
    assert not np.array_equal(before["model.embed_tokens.weight"], flat_parameters(model)["model.embed_tokens.weight"])

    reloaded, reloaded_tokenizer = load_model(args.output_dir)
    probe = mx.array([[5, 40, 90, 7]])
    model.eval()
    assert np.allclose(np.array(reloaded(probe)), np.array(model(probe)), atol=1e-5)
    assert reloaded_tokenizer.eos_token_id == 1


@pytest.mark.parametrize(
    ("overrides", "steps", "epochs_begun", "last_epoch"),
    [
        ({"num_train_epochs": 2}, 6, 2, 2.0),
        ({"max_steps": 7}, 7, 3, 2.4),
        ({"num_train_epochs": 1.5}, 5, 2, 1.8),
    ],
    ids=["two-epochs", "seven-steps", "one-and-a-half-epochs"],
)
def test_epoch_and_step_totals(load_tiny, config, overrides, steps, epochs_begun, last_epoch):
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig

    model, tokenizer = load_tiny(lora=True)
    recorder = EventRecorder()
    base = config(gradient_accumulation_steps=2).to_dict()
    base.pop("max_steps")
    base.pop("num_train_epochs")
    args = MLXTrainingConfig(**{**base, **overrides})
    # 10 rows / batch 2 = 5 micro-batches per epoch; accumulation 2 gives 3 steps, the third a forced lone one.
    output = MLXTrainer(model, tokenizer, text_rows(10), args=args, callbacks=[recorder]).train()

    assert output.global_step == steps
    assert recorder.names().count("on_epoch_begin") == epochs_begun
    assert recorder.names().count("on_epoch_end") == epochs_begun
    assert recorder.epochs_at_step_end[:3] == pytest.approx([0.4, 0.8, 1.0])
    assert recorder.epochs_at_step_end[-1] == pytest.approx(last_epoch)
    substeps_per_step = []
    for name, _ in recorder.events:
        if name == "on_step_begin":
            substeps_per_step.append(0)
        elif name == "on_substep_end":
            substeps_per_step[-1] += 1
    assert substeps_per_step[:3] == [1, 1, 0]


def test_warmup_ratio_is_resolved_against_the_real_total(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # Step mode: 4 steps, ratio 0.5 -> 2 warmup steps, then linear decay to zero.
    stepped = MLXTrainer(model, tokenizer, text_rows(8), args=config(max_steps=4, learning_rate=1e-3, warmup_ratio=0.5))
    stepped.train()
    assert logged(stepped, "learning_rate") == pytest.approx([0.0, 0.5e-3, 1e-3, 0.5e-3])

    model, tokenizer = load_tiny(lora=True)
    # Epoch mode: 8 rows / batch 2 = 4 steps for one epoch, ratio 0.25 -> 1 warmup step.
    epoch_args = config(num_train_epochs=1, max_steps=-1, learning_rate=1e-3, warmup_ratio=0.25)
    by_epoch = MLXTrainer(model, tokenizer, text_rows(8), args=epoch_args)
    by_epoch.train()
    assert logged(by_epoch, "learning_rate") == pytest.approx([0.0, 1e-3, 2e-3 / 3, 1e-3 / 3])


@pytest.mark.parametrize("mode", ["global_norm", "per_tensor_norm", "value", "none"])
def test_each_clip_mode_bounds_the_update(load_tiny, config, memorise_rows, mode):
    import numpy as np

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    before = flat_parameters(model)
    # Plain SGD at learning rate 1 with no decay makes each weight's change exactly its clipped gradient.
    args = config(
        max_steps=1,
        optim="sgd",
        learning_rate=1.0,
        weight_decay=0.0,
        grad_clip_mode=mode,
        max_grad_norm=0.01,
        max_grad_value=1e-4,
    )
    trainer = MLXTrainer(model, tokenizer, memorise_rows, args=args)
    trainer.train()
    deltas = {name: before[name] - value for name, value in flat_parameters(model).items()}
    tensor_norms = np.array([np.linalg.norm(delta) for delta in deltas.values()])
    global_norm = float(np.sqrt((tensor_norms**2).sum()))
    largest_entry = max(float(np.abs(delta).max()) for delta in deltas.values())
    grad_norm = logged(trainer, "grad_norm")[0]

    assert grad_norm > 1.0  # measured before clipping, far above every bound used here
    if mode == "global_norm":
        assert global_norm == pytest.approx(0.01, rel=1e-3)
    elif mode == "per_tensor_norm":
        assert tensor_norms.max() == pytest.approx(0.01, rel=1e-3)
        assert global_norm > 0.02  # each tensor got its own 0.01 budget
    elif mode == "value":
        assert largest_entry == pytest.approx(1e-4, rel=1e-3)
        assert global_norm > 0.01
    else:
        assert global_norm == pytest.approx(grad_norm, rel=1e-4)


@pytest.mark.parametrize(
    ("lora", "dropout"), [(False, 0.0), (True, 0.0), (True, 0.3)], ids=["full", "lora", "lora-dropout"]
)
def test_resume_reproduces_the_uninterrupted_loss_curve(load_tiny, config, tmp_path, lora, dropout):
    from unsloth_zoo.mlx import MLXTrainer

    common = {"max_steps": 6, "warmup_steps": 2, "save_strategy": "steps", "save_steps": 3, "learning_rate": 5e-3}
    model, tokenizer = load_tiny(lora=lora, dropout=dropout)
    straight = MLXTrainer(model, tokenizer, text_rows(8), args=config(output_dir=str(tmp_path / "a"), **common))
    straight.train()

    model, tokenizer = load_tiny(lora=lora, dropout=dropout)
    resumed = MLXTrainer(model, tokenizer, text_rows(8), args=config(output_dir=str(tmp_path / "b"), **common))
    output = resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-3"))

    assert output.global_step == 6
    for key in ("loss", "grad_norm", "learning_rate"):
        assert logged(resumed, key) == pytest.approx(logged(straight, key), rel=1e-5)
    assert [entry["step"] for entry in resumed.state.log_history if "loss" in entry] == [1, 2, 3, 4, 5, 6]

    model, tokenizer = load_tiny(lora=lora, dropout=dropout)
    recorder = EventRecorder()
    finished = MLXTrainer(
        model, tokenizer, text_rows(8), args=config(output_dir=str(tmp_path / "a"), **common), callbacks=[recorder]
    )
    assert finished.train(resume_from_checkpoint=True).global_step == 6
    assert "on_step_begin" not in recorder.names()


def test_save_total_limit_keeps_the_newest(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    args = config(max_steps=5, save_strategy="steps", save_steps=1, save_total_limit=2)
    MLXTrainer(model, tokenizer, text_rows(8), args=args).train()
    output_dir = Path(args.output_dir)
    assert sorted(path.name for path in output_dir.iterdir() if path.name.startswith("checkpoint")) == [
        "checkpoint-4",
        "checkpoint-5",
    ]
    state = json.loads((output_dir / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["global_step"] == 5 and len([entry for entry in state["log_history"] if "loss" in entry]) == 5
    assert {path.name for path in (output_dir / "checkpoint-5").iterdir()} >= {
        "adapters.safetensors",
        "adapter_config.json",
        "optimizer.safetensors",
        "trainer_state.json",
    }


def test_save_total_limit_never_deletes_the_best_checkpoint(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # Learning rate zero: the first evaluation stays the best, so checkpoint-1 must survive a limit of one.
    args = config(
        max_steps=4,
        learning_rate=0.0,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=1,
        eval_strategy="steps",
        eval_steps=1,
        metric_for_best_model="eval_loss",
    )
    trainer = MLXTrainer(model, tokenizer, text_rows(8), text_rows(4), args=args)
    trainer.train()
    output_dir = Path(args.output_dir)
    assert sorted(path.name for path in output_dir.iterdir() if path.name.startswith("checkpoint")) == [
        "checkpoint-1",
        "checkpoint-4",
    ]
    assert Path(trainer.state.best_model_checkpoint) == output_dir / "checkpoint-1"
    assert trainer.state.best_global_step == 1


def test_the_callers_args_are_copied_not_mutated(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    args = config(num_train_epochs=1, max_steps=-1, eval_steps=None)
    snapshot = args.to_json_string()
    model, tokenizer = load_tiny(lora=True)
    trainer = MLXTrainer(model, tokenizer, text_rows(4), args=args)
    trainer.train()
    assert trainer.args is not args
    assert args.to_json_string() == snapshot


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_compiled_steps_follow_the_same_curve(load_tiny, config, lora):
    from unsloth_zoo.mlx import MLXTrainer

    curves = []
    for compiled in (False, True):
        model, tokenizer = load_tiny(lora=lora)
        trainer = MLXTrainer(
            model, tokenizer, text_rows(8), args=config(max_steps=5, gradient_accumulation_steps=2, mx_compile=compiled)
        )
        trainer.train()
        curves.append(logged(trainer, "loss"))
    assert curves[1] == pytest.approx(curves[0], rel=1e-4)
    assert curves[0][-1] < curves[0][0]


@pytest.mark.parametrize(
    ("optim", "learning_rate"),
    [("adamw", 3e-3), ("adam", 3e-3), ("sgd", 0.5), ("adafactor", 3e-3), ("lion", 3e-4)],
)
def test_each_optimizer_lowers_the_loss(load_tiny, config, memorise_rows, optim, learning_rate):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    args = config(max_steps=4, per_device_train_batch_size=8, optim=optim, learning_rate=learning_rate)
    trainer = MLXTrainer(model, tokenizer, memorise_rows, args=args)
    trainer.train()
    losses = logged(trainer, "loss")
    assert type(trainer.optimizer).__name__.lower() == optim
    assert losses[-1] < losses[0] - 0.1


def test_compile_is_off_by_default_on_cpu(load_tiny, config, memorise_rows):
    import mlx.core as mx

    from unsloth_zoo.mlx import MLXTrainer

    assert mx.default_device().type == mx.DeviceType.cpu
    model, tokenizer = load_tiny()
    assert MLXTrainer(model, tokenizer, memorise_rows, args=config())._use_compile() is False
    assert MLXTrainer(model, tokenizer, memorise_rows, args=config(mx_compile=True))._use_compile() is True
