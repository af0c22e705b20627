"""Rule 2: `UnslothTrainingArguments` translates a CUDA notebook's keywords, or refuses them by name."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from unsloth import UnslothTrainingArguments
from unsloth_zoo.mlx import MLXTrainingConfig


def _quietly(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return UnslothTrainingArguments(**kwargs)


def test_keywords_a_dict_or_a_path() -> None:
    assert UnslothTrainingArguments(output_dir="a", max_steps=7).max_steps == 7
    assert UnslothTrainingArguments({"output_dir": "b", "max_steps": 8}).max_steps == 8
    from_path = UnslothTrainingArguments("runs/c", max_steps=9)
    assert (from_path.output_dir, from_path.max_steps) == ("runs/c", 9)
    assert UnslothTrainingArguments(Path("runs/d")).output_dir == "runs/d"
    with pytest.raises(TypeError, match="several positionals"):
        UnslothTrainingArguments("a", "b")
    with pytest.raises(TypeError, match="both positionally and as keywords"):
        UnslothTrainingArguments({"max_steps": 3}, max_steps=4)
    with pytest.raises(TypeError, match="got int"):
        UnslothTrainingArguments(5)


def test_aliases_and_the_canonical_name_winning() -> None:
    aliased = UnslothTrainingArguments(max_length=256)
    assert (aliased.max_seq_length, aliased.max_seq_length_source) == (256, "max_length")
    both = UnslothTrainingArguments(max_length=256, max_seq_length=128)
    assert (both.max_seq_length, both.max_seq_length_source) == (128, "max_seq_length")
    assert UnslothTrainingArguments(max_seq_length=128, max_length=256).max_seq_length == 128
    assert UnslothTrainingArguments(evaluation_strategy="steps", eval_steps=2).eval_strategy == "steps"
    assert UnslothTrainingArguments(evaluation_strategy="steps", eval_strategy="no").eval_strategy == "no"
    unset = UnslothTrainingArguments()
    assert (unset.max_seq_length, unset.max_seq_length_source) == (None, None)


def test_epochs_integral_values_become_int_and_mean_epoch_mode() -> None:
    two = UnslothTrainingArguments(num_train_epochs=2.0)
    assert type(two.num_train_epochs) is int and two.num_train_epochs == 2
    assert two.max_steps == -1
    assert UnslothTrainingArguments(num_train_epochs=1.5).num_train_epochs == 1.5
    both = UnslothTrainingArguments(num_train_epochs=3.0, max_steps=10)
    assert (both.max_steps, both.num_train_epochs) == (10, 3)
    assert UnslothTrainingArguments().max_steps == 60  # the backend's step-mode default when neither is given


def test_enums_and_spellings_are_normalised() -> None:
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    args = UnslothTrainingArguments(lr_scheduler_type=SchedulerType.COSINE, optim=OptimizerNames.ADAMW_TORCH_FUSED)
    assert (args.lr_scheduler_type, args.optim) == ("cosine", "adamw")
    assert UnslothTrainingArguments(lr_scheduler_type="SchedulerType.CONSTANT").lr_scheduler_type == "constant"
    assert (
        UnslothTrainingArguments(lr_scheduler_type="Constant-With-Warmup").lr_scheduler_type == "constant_with_warmup"
    )
    assert UnslothTrainingArguments(optim="OptimizerNames.PAGED_ADAMW_8BIT").optim == "adamw"


@pytest.mark.parametrize(
    ("cuda_name", "mlx_name"),
    [
        ("adamw_torch", "adamw"),
        ("adamw_torch_fused", "adamw"),
        ("paged_adamw_8bit", "adamw"),
        ("adamw_bnb_8bit", "adamw"),
        ("adamw_8bit", "adamw"),
        ("paged_adamw_32bit", "adamw"),
        ("lion_8bit", "lion"),
        ("sgd", "sgd"),
        ("adafactor", "adafactor"),
    ],
)
def test_cuda_optimizer_names_map_to_the_mlx_optimizer(cuda_name: str, mlx_name: str) -> None:
    assert UnslothTrainingArguments(optim=cuda_name).optim == mlx_name


def test_unknown_optimizer_and_schedule_list_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"optim='rmsprop'.*supported optimizers: .*adamw_torch_fused"):
        UnslothTrainingArguments(optim="rmsprop")
    with pytest.raises(ValueError, match=r"lr_scheduler_type='polynomial'.*supported schedules: linear, cosine"):
        UnslothTrainingArguments(lr_scheduler_type="polynomial")


def test_warmup_ratio_becomes_steps_against_max_steps() -> None:
    assert UnslothTrainingArguments(max_steps=50, warmup_ratio=0.1).warmup_steps == 5
    assert UnslothTrainingArguments(max_steps=10, warmup_ratio=0.15).warmup_steps == 2  # ceil(1.5)
    assert UnslothTrainingArguments(max_steps=10, warmup_ratio=0.5, warmup_steps=3).warmup_steps == 3
    assert UnslothTrainingArguments(max_steps=10, warmup_ratio=0.5, warmup_steps=0).warmup_steps == 5
    epochs = UnslothTrainingArguments(num_train_epochs=2, warmup_ratio=0.25)
    assert (epochs.warmup_steps, epochs.warmup_ratio) == (0, 0.25)  # resolved against the real total at train time


def test_cuda_only_keywords_warn_once_naming_only_those_that_asked_for_something() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = UnslothTrainingArguments(
            bf16=True,
            fp16=False,
            dataloader_num_workers=4,
            report_to="none",
            push_to_hub=False,
            gradient_checkpointing_kwargs=None,
            max_steps=3,
        )
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    message = str(caught[0].message)
    assert "bf16, dataloader_num_workers have no effect on MLX" in message
    for quiet in ("fp16", "report_to", "push_to_hub", "gradient_checkpointing_kwargs"):
        assert quiet not in message
    assert args.max_steps == 3
    _quietly(fp16=False, bf16=False, report_to="none", dataloader_num_workers=0, push_to_hub=False)


def test_unknown_keywords_are_refused_before_anything_else() -> None:
    with warnings.catch_warnings():
        # No warning and no ValueError may come first: the refusal is the very first thing.
        warnings.simplefilter("error")
        with pytest.raises(NotImplementedError, match=r"does not support not_a_real_option, use_turbo_mode on MLX"):
            UnslothTrainingArguments(not_a_real_option=1, use_turbo_mode=True, bf16=True, optim="rmsprop")


def test_keywords_that_would_change_training_are_refused_unless_at_their_default() -> None:
    with pytest.raises(NotImplementedError, match=r"cannot train with eval_packing=True, neftune_noise_alpha=5"):
        UnslothTrainingArguments(eval_packing=True, neftune_noise_alpha=5)
    with pytest.raises(NotImplementedError, match=r"train_sampling_strategy='group_by_length'"):
        UnslothTrainingArguments(train_sampling_strategy="group_by_length")
    args = _quietly(
        packing=False, neftune_noise_alpha=None, group_by_length=False, train_sampling_strategy="sequential"
    )
    assert args.dataset_order == "sequential"


def test_public_defaults_differ_from_the_backend_where_cuda_unsloth_does() -> None:
    public, backend = UnslothTrainingArguments(), MLXTrainingConfig()
    assert (public.append_eos, backend.append_eos) == (False, True)
    assert (public.grad_clip_mode, public.max_grad_norm) == ("global_norm", 1.0)
    assert UnslothTrainingArguments(append_eos=True).append_eos is True


def test_sft_config_keeps_trl_three_epoch_default() -> None:
    from unsloth.mlx.compat.trl_shim import SFTConfig

    unset = SFTConfig(output_dir="x")
    assert (unset.num_train_epochs, unset.max_steps) == (3, -1)
    assert (SFTConfig(max_steps=5).max_steps, SFTConfig(max_steps=5).num_train_epochs) == (5, -1)
    assert (SFTConfig(num_train_epochs=1).num_train_epochs, SFTConfig(num_train_epochs=1).max_steps) == (1, -1)


def test_hugging_face_training_arguments_become_the_same_translation(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("accelerate") is None:
        pytest.skip("with torch installed, transformers' TrainingArguments needs accelerate, which this session lacks")
    from transformers import TrainingArguments

    from unsloth.mlx.training.arguments import trainer_arguments as public_config

    hf = TrainingArguments(
        output_dir=str(tmp_path), max_steps=3, learning_rate=1e-3, optim="adamw_torch_fused", lr_scheduler_type="cosine"
    )
    config = public_config(hf, {})
    # Fields the backend shares keep Hugging Face's own defaults (batch size 8, seed 42, logging every 500 steps).
    assert (config.max_steps, config.learning_rate, config.optim, config.lr_scheduler_type) == (
        3,
        1e-3,
        "adamw",
        "cosine",
    )
    assert (config.per_device_train_batch_size, config.seed, config.logging_steps, config.warmup_steps) == (
        8,
        42,
        500,
        0,
    )
    with pytest.raises(NotImplementedError, match=r"neftune_noise_alpha=5"):
        public_config(TrainingArguments(output_dir=str(tmp_path), neftune_noise_alpha=5), {})
