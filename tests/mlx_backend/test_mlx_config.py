"""MLXTrainingConfig: defaults, positional binding, unknown keywords, serialisation, and the worker-count policy."""

from __future__ import annotations

import dataclasses
import json

import pytest

from unsloth_zoo.mlx.config import MLXTrainingConfig, coerce_config

# The declared order so far; new fields may only ever be appended after these.
FIELD_ORDER = [
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "num_train_epochs",
    "warmup_steps",
    "learning_rate",
    "lr_scheduler_type",
    "optim",
    "weight_decay",
    "seed",
    "logging_steps",
    "output_dir",
    "max_seq_length",
    "dataset_text_field",
    "append_eos",
    "dataset_order",
    "dataset_num_proc",
    "warmup_ratio",
    "max_grad_norm",
    "grad_clip_mode",
    "max_grad_value",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "per_device_eval_batch_size",
    "logging_strategy",
    "logging_first_step",
    "eval_strategy",
    "eval_steps",
    "eval_delay",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "save_only_model",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
    "mx_compile",
    "pad_to_multiple_of",
]


def test_defaults(monkeypatch):
    monkeypatch.setenv("UNSLOTH_DATASET_NUM_PROC", "4")
    config = MLXTrainingConfig()
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (2, 4)
    assert (config.max_steps, config.num_train_epochs, config.warmup_steps) == (60, -1, 5)
    assert (config.learning_rate, config.lr_scheduler_type, config.optim, config.weight_decay) == (
        2e-4,
        "linear",
        "adamw",
        0.001,
    )
    assert (config.seed, config.logging_steps, config.output_dir) == (3407, 1, "./outputs")
    assert (config.max_seq_length, config.dataset_text_field, config.append_eos, config.dataset_order) == (
        2048,
        "text",
        True,
        "default",
    )
    assert config.dataset_num_proc == 4
    assert config.mx_compile is None and config.eval_strategy == "no" and config.save_strategy == "steps"


def test_fields_bind_positionally_in_declared_order():
    names = [item.name for item in dataclasses.fields(MLXTrainingConfig)]
    assert names[: len(FIELD_ORDER)] == FIELD_ORDER
    config = MLXTrainingConfig(8, 1, 100, -1, 0, 1e-3, "cosine", "lion")
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps, config.max_steps) == (8, 1, 100)
    assert (config.warmup_steps, config.learning_rate, config.lr_scheduler_type, config.optim) == (
        0,
        1e-3,
        "cosine",
        "lion",
    )


def test_unknown_keywords_raise_type_error_naming_them_sorted():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): batch_size, lora_rank, zeta$"):
        MLXTrainingConfig(zeta=1, lora_rank=8, batch_size=2, max_steps=3)


@pytest.mark.parametrize(
    ("environment", "requested", "expected"),
    [("3", None, 3), ("0", None, 1), ("none", 8, 1), (None, 1, 1), (None, 0, 1)],
    ids=["override-3", "override-serial", "override-beats-request", "serial-request", "zero-request"],
)
def test_dataset_num_proc_goes_through_the_policy_at_the_config_layer(monkeypatch, environment, requested, expected):
    if environment is None:
        monkeypatch.delenv("UNSLOTH_DATASET_NUM_PROC", raising=False)
    else:
        monkeypatch.setenv("UNSLOTH_DATASET_NUM_PROC", environment)
    assert MLXTrainingConfig(dataset_num_proc=requested).dataset_num_proc == expected


def test_epochs_alone_select_epoch_mode_and_both_keep_hugging_faces_rule():
    assert MLXTrainingConfig(num_train_epochs=2).max_steps == -1
    assert MLXTrainingConfig(num_train_epochs=2, max_steps=10).max_steps == 10
    assert MLXTrainingConfig(warmup_ratio=0.1).warmup_steps == 0
    assert MLXTrainingConfig(warmup_ratio=0.1, warmup_steps=3).warmup_steps == 3
    with pytest.raises(ValueError, match="max_steps"):
        MLXTrainingConfig(max_steps=-1)


def test_serialisation_round_trips():
    config = MLXTrainingConfig(max_steps=7, eval_strategy="steps", eval_steps=3, save_total_limit=2)
    as_dict = config.to_dict()
    assert as_dict["max_steps"] == 7 and as_dict["save_total_limit"] == 2
    assert json.loads(config.to_json_string()) == as_dict
    assert MLXTrainingConfig(**as_dict) == config

    sanitized = config.to_sanitized_dict()
    assert sanitized["metric_for_best_model"] == "None" and sanitized["mx_compile"] == "None"
    assert sanitized["train_batch_size"] == 2 and sanitized["eval_batch_size"] == 8
    assert all(type(value) in (bool, int, float, str) for value in sanitized.values())


def test_derived_fields_follow_hugging_face():
    assert MLXTrainingConfig(logging_steps=3).eval_steps == 3
    best = MLXTrainingConfig(load_best_model_at_end=True)
    assert (best.metric_for_best_model, best.greater_is_better) == ("loss", False)
    assert MLXTrainingConfig(metric_for_best_model="accuracy").greater_is_better is True


class EnumLike:
    value = "EPOCH"


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("eval_strategy", EnumLike(), "epoch"),
        ("save_strategy", "NO", "no"),
        ("optim", "adamw_8bit", "adamw_8bit"),
        ("optim", "paged_lion_8bit", "paged_lion_8bit"),
    ],
)
def test_accepted_spellings(field, value, accepted):
    assert getattr(MLXTrainingConfig(**{field: value}), field) == accepted


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("eval_strategy", "sometimes"),
        ("optim", "rmsprop"),
        ("lr_scheduler_type", "polynomial"),
        ("grad_clip_mode", "soft"),
        ("dataset_order", "random"),
        ("gradient_accumulation_steps", 0),
    ],
)
def test_bad_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        MLXTrainingConfig(**{field: value})


def test_coerce_copies_our_config_and_reads_training_arguments():
    from transformers import TrainingArguments

    ours = MLXTrainingConfig(max_steps=5)
    copied = coerce_config(ours)
    assert copied == ours and copied is not ours

    hugging_face = TrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=3,
        max_steps=7,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=3,
        report_to="none",
    )
    converted = coerce_config(hugging_face)
    assert (converted.per_device_train_batch_size, converted.max_steps, converted.logging_steps) == (3, 7, 2)
    assert (converted.eval_strategy, converted.eval_steps, converted.optim, converted.seed) == (
        "steps",
        3,
        "adamw_torch",
        42,
    )

    from_dict = coerce_config({"max_steps": 9})
    assert from_dict.max_steps == 9 and from_dict.per_device_train_batch_size == 2


def test_the_config_records_whether_dataset_num_proc_was_auto(monkeypatch):
    from unsloth_zoo.dataset_num_proc import map_request

    monkeypatch.delenv("UNSLOTH_DATASET_NUM_PROC", raising=False)
    auto = MLXTrainingConfig()
    assert isinstance(auto.dataset_num_proc, int)  # resolved at the config layer, before any row is known...
    assert map_request(auto) is None  # ...yet each map still auto-sizes with its own rows
    assert map_request(MLXTrainingConfig(dataset_num_proc=0)) == 1
    assert map_request(MLXTrainingConfig(dataset_num_proc=3)) == 3
