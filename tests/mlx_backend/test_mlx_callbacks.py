"""Hugging Face callbacks driven by real MLX training: the event sequence, control requests, and transformers' own callbacks."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mlx_test_kit import text_rows as train_rows


def test_event_sequence_with_accumulation_logging_eval_and_save(load_tiny, config, recorder, tmp_path):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # 6 rows / batch 2 = 3 micro-batches per epoch; accumulation 2 makes 2 steps, the second a lone micro-batch.
    args = config(
        gradient_accumulation_steps=2,
        max_steps=4,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=3,
        per_device_eval_batch_size=2,
    )
    trainer = MLXTrainer(model, tokenizer, train_rows(6), train_rows(4), args=args, callbacks=[recorder])
    output = trainer.train()

    step_with_substep = lambda before: [  # noqa: E731
        ("on_step_begin", before),
        ("on_substep_end", before),
        ("on_pre_optimizer_step", before),
        ("on_optimizer_step", before),
        ("on_step_end", before + 1),
    ]
    lone_step = lambda before: [  # noqa: E731
        ("on_step_begin", before),
        ("on_pre_optimizer_step", before),
        ("on_optimizer_step", before),
        ("on_step_end", before + 1),
    ]
    evaluation = lambda step: [  # noqa: E731
        ("on_prediction_step", step),
        ("on_prediction_step", step),
        ("on_log", step),
        ("on_evaluate", step),
    ]
    expected = [
        ("on_init_end", 0),
        ("on_train_begin", 0),
        ("on_epoch_begin", 0),
        *step_with_substep(0),
        *lone_step(1),
        ("on_log", 2),
        *evaluation(2),
        ("on_epoch_end", 2),
        ("on_epoch_begin", 2),
        *step_with_substep(2),
        ("on_save", 3),
        *lone_step(3),
        ("on_log", 4),
        *evaluation(4),
        ("on_save", 4),
        ("on_epoch_end", 4),
        ("on_log", 4),
        ("on_train_end", 4),
    ]
    assert recorder.events == expected
    assert recorder.epochs_at_step_end == pytest.approx([2 / 3, 1.0, 5 / 3, 2.0])
    assert output.global_step == 4

    train_log, eval_log, _, _, summary = recorder.logs
    assert set(train_log) == {"loss", "grad_norm", "learning_rate", "epoch"}
    assert set(eval_log) == {
        "eval_loss",
        "eval_perplexity",
        "eval_runtime",
        "eval_samples_per_second",
        "eval_steps_per_second",
        "epoch",
    }
    assert eval_log["eval_perplexity"] == pytest.approx(math.exp(eval_log["eval_loss"]))
    assert {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "train_tokens_per_second",
        "train_loss",
    } <= set(summary)
    assert [entry["step"] for entry in trainer.state.log_history] == [2, 2, 4, 4, 4]
    checkpoints = sorted(path.name for path in Path(args.output_dir).glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-3", "checkpoint-4"]


def test_should_training_stop_at_step_two_ends_the_run_there(load_tiny, config, recorder):
    from unsloth_zoo.mlx import MLXTrainer

    class StopAtTwo:
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                control.should_training_stop = True

    model, tokenizer = load_tiny()
    trainer = MLXTrainer(model, tokenizer, train_rows(8), args=config(max_steps=10), callbacks=[StopAtTwo(), recorder])
    output = trainer.train()

    assert output.global_step == 2
    assert trainer.state.global_step == 2
    assert recorder.events[-3:] == [("on_epoch_end", 2), ("on_log", 2), ("on_train_end", 2)]
    assert recorder.names().count("on_step_end") == 2


def test_control_requests_are_honoured_whatever_the_strategy(load_tiny, config, tmp_path):
    from unsloth_zoo.mlx import MLXTrainer, TrainerControl

    class AskOnce:
        """Asks for a log at step 3 on the given control, and returns a brand-new control asking for a save at step 1."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                return TrainerControl(should_save=True)
            if state.global_step == 3:
                control.should_log = True
            return None

    model, tokenizer = load_tiny()
    args = config(max_steps=4, logging_strategy="no", save_strategy="no")
    trainer = MLXTrainer(model, tokenizer, train_rows(8), args=args, callbacks=[AskOnce()])
    trainer.train()

    assert sorted(path.name for path in Path(args.output_dir).glob("checkpoint-*")) == ["checkpoint-1"]
    loss_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in loss_logs] == [3]
    assert trainer.control.should_save is False and trainer.control.should_log is False


def test_flags_are_cleared_before_their_event(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    seen = []

    class Watch:
        def on_log(self, args, state, control, **kwargs):
            seen.append(("on_log", control.should_log))

        def on_save(self, args, state, control, **kwargs):
            seen.append(("on_save", control.should_save))

        def on_step_begin(self, args, state, control, **kwargs):
            seen.append(("on_step_begin", control.should_log or control.should_save or control.should_evaluate))

    model, tokenizer = load_tiny()
    trainer = MLXTrainer(
        model,
        tokenizer,
        train_rows(4),
        args=config(max_steps=2, save_strategy="steps", save_steps=1),
        callbacks=[Watch()],
    )
    trainer.train()
    assert seen == [
        ("on_step_begin", False),
        ("on_log", False),
        ("on_save", False),
        ("on_step_begin", False),
        ("on_log", False),
        ("on_save", False),
        ("on_log", False),
    ]


def test_early_stopping_stops_a_run_whose_eval_loss_stops_improving(load_tiny, config):
    from transformers.trainer_callback import EarlyStoppingCallback

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    # A learning rate of zero keeps the eval loss exactly flat: the first eval sets the best, the next two do not beat it.
    args = config(
        max_steps=10, learning_rate=0.0, eval_strategy="steps", eval_steps=1, metric_for_best_model="eval_loss"
    )
    trainer = MLXTrainer(
        model,
        tokenizer,
        train_rows(8),
        train_rows(4),
        args=args,
        callbacks=[EarlyStoppingCallback(early_stopping_patience=2)],
    )
    output = trainer.train()

    assert output.global_step == 3
    eval_losses = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert len(eval_losses) == 3 and eval_losses[0] == eval_losses[1] == eval_losses[2]
    assert trainer.state.best_metric == eval_losses[0]
    assert trainer.args.greater_is_better is False


def test_early_stopping_lets_an_improving_run_finish(load_tiny, config):
    from transformers.trainer_callback import EarlyStoppingCallback

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    args = config(max_steps=6, eval_strategy="steps", eval_steps=1, metric_for_best_model="loss")
    rows = train_rows(8)
    trainer = MLXTrainer(
        model, tokenizer, rows, rows[:4], args=args, callbacks=[EarlyStoppingCallback(early_stopping_patience=1)]
    )
    output = trainer.train()

    assert output.global_step == 6
    eval_losses = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert all(later < earlier for earlier, later in zip(eval_losses, eval_losses[1:]))
    assert trainer.state.best_metric == eval_losses[-1]


def test_progress_callback_prints_progress(load_tiny, config, capfd):
    from transformers.trainer_callback import ProgressCallback

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    args = config(max_steps=4, logging_steps=2, eval_strategy="steps", eval_steps=4, per_device_eval_batch_size=2)
    trainer = MLXTrainer(model, tokenizer, train_rows(8), train_rows(4), args=args, callbacks=[ProgressCallback])
    trainer.train()

    captured = capfd.readouterr()
    text = captured.out + captured.err
    assert re.search(r"100%.*4/4", text), text
    assert re.search(r"2/2", text), text  # the evaluation bar over two eval batches
    assert "'loss':" in captured.out and "'eval_loss':" in captured.out and "'train_runtime':" in captured.out


def test_printer_callback_prints_each_log(load_tiny, config, capsys):
    from transformers.trainer_callback import PrinterCallback

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny()
    trainer = MLXTrainer(model, tokenizer, train_rows(4), args=config(max_steps=2), callbacks=[PrinterCallback()])
    trainer.train()

    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(lines) == 3
    # Linear decay from 3e-3 over two steps, floats shown with four significant digits.
    assert lines[0].startswith("{'loss': '") and lines[0].endswith("'learning_rate': '0.003', 'epoch': '0.5'}")
    assert lines[1].endswith("'learning_rate': '0.0015', 'epoch': '1'}")
    assert "'train_loss':" in lines[2]


def test_add_pop_and_remove_callbacks(load_tiny, config, recorder):
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from unsloth_zoo.mlx import FlowCallback, MLXTrainer

    model, tokenizer = load_tiny()
    trainer = MLXTrainer(model, tokenizer, train_rows(4), args=config(), callbacks=[PrinterCallback])
    trainer.add_callback(recorder)
    trainer.add_callback(ProgressCallback)
    kinds = [type(callback) for callback in trainer.callback_handler.callbacks]
    assert kinds == [FlowCallback, PrinterCallback, type(recorder), ProgressCallback]

    popped = trainer.pop_callback(PrinterCallback)
    assert isinstance(popped, PrinterCallback)
    assert trainer.pop_callback(popped) is None
    trainer.remove_callback(recorder)
    trainer.remove_callback(ProgressCallback)
    assert [type(callback) for callback in trainer.callback_handler.callbacks] == [FlowCallback]
    with pytest.raises(ValueError):
        trainer.remove_callback(recorder)
    assert recorder.events == []  # removed before training, and it was added after on_init_end


def test_epoch_strategies_act_at_each_epoch_end(load_tiny, config, recorder):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # 4 rows / batch 2 = 2 steps per epoch, two epochs.
    args = config(
        num_train_epochs=2,
        max_steps=-1,
        logging_strategy="epoch",
        eval_strategy="epoch",
        save_strategy="epoch",
        per_device_eval_batch_size=4,
    )
    trainer = MLXTrainer(model, tokenizer, train_rows(4), train_rows(4), args=args, callbacks=[recorder])
    trainer.train()

    after_first_epoch = recorder.events[recorder.events.index(("on_epoch_end", 2)) :][:6]
    assert after_first_epoch == [
        ("on_epoch_end", 2),
        ("on_log", 2),
        ("on_prediction_step", 2),
        ("on_log", 2),
        ("on_evaluate", 2),
        ("on_save", 2),
    ]
    assert [entry["step"] for entry in trainer.state.log_history] == [2, 2, 4, 4, 4]
    assert [entry["epoch"] for entry in trainer.state.log_history] == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert [("loss" in entry, "eval_loss" in entry) for entry in trainer.state.log_history[:4]] == [
        (True, False),
        (False, True),
        (True, False),
        (False, True),
    ]
    assert sorted(path.name for path in Path(args.output_dir).glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_first_step_logging_ratios_and_eval_delay(load_tiny, config):
    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # Ratios of the 4-step run: logging every ceil(0.5 * 4) = 2 steps, saving every ceil(0.75 * 4) = 3.
    args = config(
        max_steps=4,
        logging_steps=0.5,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=0.75,
        eval_strategy="steps",
        eval_steps=1,
        eval_delay=3,
    )
    trainer = MLXTrainer(model, tokenizer, train_rows(8), train_rows(2), args=args)
    trainer.train()

    history = trainer.state.log_history
    assert [entry["step"] for entry in history if "loss" in entry] == [1, 2, 4]
    assert [entry["step"] for entry in history if "eval_loss" in entry] == [3, 4]
    assert (trainer.state.logging_steps, trainer.state.save_steps, trainer.state.eval_steps) == (2, 3, 1)
    assert sorted(path.name for path in Path(args.output_dir).glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]


def test_load_best_model_at_end_restores_the_best_checkpoint(load_tiny, config):
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx import MLXTrainer

    model, tokenizer = load_tiny(lora=True)
    # The loss falls every step, so asking for the greatest eval loss makes the first checkpoint the best one.
    args = config(
        max_steps=4,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        metric_for_best_model="eval_loss",
        greater_is_better=True,
        load_best_model_at_end=True,
    )
    rows = train_rows(4)
    trainer = MLXTrainer(model, tokenizer, rows, rows, args=args)
    trainer.train()

    assert Path(trainer.state.best_model_checkpoint).name == "checkpoint-1"
    best = mx.load(str(Path(args.output_dir) / "checkpoint-1" / "adapters.safetensors"))
    last = mx.load(str(Path(args.output_dir) / "checkpoint-4" / "adapters.safetensors"))
    current = dict(tree_flatten(model.trainable_parameters()))
    assert all(np.array_equal(np.array(current[name]), np.array(best[name])) for name in best)
    assert not all(np.array_equal(np.array(current[name]), np.array(last[name])) for name in last)
