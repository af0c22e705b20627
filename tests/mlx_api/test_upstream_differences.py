"""What upstream's own MLX test file (`unslothai/unsloth`, `tests/python/test_mlx_public_trainer_api.py`) found
different here, each settled as TRL, the Hugging Face `Trainer` or CUDA Unsloth do it, or kept and said why in
docs/mlx-upstream-parity.md."""

from __future__ import annotations

import types
from typing import Any

import pytest

from unsloth import UnslothTrainer, UnslothTrainingArguments

from .conftest import chat_text


# ---- 1. a dataset that brings its own input_ids ----


def test_given_input_ids_are_trained_on_not_the_text_beside_them(load_public, quiet_args) -> None:
    model, tokenizer = load_public(lora=True)
    given = [tokenizer(chat_text("Why?", f"Because {n}."), add_special_tokens=False)["input_ids"] for n in range(4)]
    # The text column says something else: TRL and CUDA Unsloth train on the input_ids, never re-tokenize it.
    data = [{"text": chat_text("Other?", "Other words entirely."), "input_ids": ids} for ids in given]
    trainer = UnslothTrainer(model, tokenizer, data, args=quiet_args(max_steps=1))
    assert [list(row) for row in trainer.train_rows.source_rows] == given
    assert trainer.train().global_step == 1


# ---- 2. dataset order ----


def test_torch_randperm_is_a_dataset_order_the_arguments_accept() -> None:
    args = UnslothTrainingArguments(dataset_order="torch_randperm", max_steps=1)
    assert args.dataset_order == "torch_randperm"
    assert UnslothTrainingArguments(max_steps=1).dataset_order == "default"
    with pytest.raises(ValueError, match="dataset_order"):
        UnslothTrainingArguments(dataset_order="shuffled")


def test_an_explicit_default_order_is_mlx_own_order(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(dataset_order="default"))
    assert trainer.args.dataset_order == "default" and trainer.cuda_batch_order is False


# torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist(), printed by torch 2.13 on the CPU.
TORCH_RANDPERM = {
    (1234, 8): [7, 5, 2, 3, 4, 6, 1, 0],
    (7, 8): [7, 0, 3, 4, 1, 5, 2, 6],
    (5, 10): [1, 4, 9, 6, 3, 5, 0, 2, 8, 7],
}


def test_cuda_unsloths_order_is_drawn_without_torch() -> None:
    from unsloth.mlx.training.train_data import cuda_epoch_order

    assert cuda_epoch_order(8, 1233, 1) == TORCH_RANDPERM[1234, 8]
    assert cuda_epoch_order(8, 7, 0) == TORCH_RANDPERM[7, 8]
    # torch seeds its Mersenne Twister with the seed's low 32 bits.
    assert cuda_epoch_order(10, 2**32 + 5, 0) == TORCH_RANDPERM[5, 10]
    assert cuda_epoch_order(0, 1, 0) == [] and cuda_epoch_order(1, 1, 0) == [0]


@pytest.mark.parametrize("order", [{}, {"dataset_order": "torch_randperm"}])
def test_unset_or_named_the_order_is_torch_randperm_with_or_without_torch(
    load_public, chat_rows, quiet_args, order
) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(seed=7, **order))
    assert trainer.args.dataset_order == "torch_randperm" and trainer.cuda_batch_order is True
    trainer._epoch_batches(0)
    assert trainer.train_rows.order.tolist() == TORCH_RANDPERM[7, 8]


def test_streaming_true_reads_the_rows_in_the_order_they_come(load_public, chat_rows, quiet_args) -> None:
    from datasets import Dataset

    model, tokenizer = load_public(lora=True)
    streamed = Dataset.from_list(chat_rows).to_iterable_dataset()
    args = quiet_args(streaming=True, max_steps=2)
    assert args.streaming is True
    trainer = UnslothTrainer(model, tokenizer, streamed, args=args)
    assert trainer.args.dataset_order == "sequential"
    assert trainer.train().global_step == 2
    # A list given with streaming=True is read in its own order too, as a stream would be.
    listed = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(streaming=True))
    assert listed.args.dataset_order == "sequential"


# ---- 3. args as a plain object ----


def test_a_plain_object_or_namespace_is_read_by_attribute(load_public, chat_rows, tmp_path) -> None:
    model, tokenizer = load_public()
    namespace = types.SimpleNamespace(max_steps=3, learning_rate=1e-3, output_dir=str(tmp_path), max_seq_length=48)
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=namespace)
    assert (trainer.args.max_steps, trainer.args.learning_rate, trainer.args.max_seq_length) == (3, 1e-3, 48)

    class Settings:
        max_steps = 2
        optim = "adamw_8bit"
        save_strategy = "no"

    from_class = UnslothTrainer(model, tokenizer, chat_rows, args=Settings())
    assert (from_class.args.max_steps, from_class.args.optim) == (2, "adamw")

    class Unknown:
        max_steps = 2
        not_a_training_argument = 1

    with pytest.raises(NotImplementedError, match="not_a_training_argument"):
        UnslothTrainer(model, tokenizer, chat_rows, args=Unknown())


# ---- 4. context length ----


def test_a_trainer_level_max_seq_length_is_kept_above_the_loaded_length(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public(max_seq_length=321)
    kept = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_seq_length=None), max_seq_length=400)
    assert kept.args.max_seq_length == 400
    # In the arguments it is still brought down to the length the model was loaded for, as CUDA Unsloth does.
    assert UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(max_seq_length=400)).args.max_seq_length == 321


def test_a_raw_mlx_lm_model_trains_at_1024_or_its_max_length(load_public, chat_rows, quiet_args) -> None:
    from unsloth_zoo.mlx import load_model

    model, tokenizer = load_public()
    raw, _ = load_model(model.unsloth_source_path)  # 512 positions in its config, no max_seq_length of its own
    assert UnslothTrainer(raw, tokenizer, chat_rows, args=quiet_args(max_seq_length=None)).args.max_seq_length == 1024
    raw.max_length = 777
    assert UnslothTrainer(raw, tokenizer, chat_rows, args=quiet_args(max_seq_length=None)).args.max_seq_length == 777


# ---- 5. the processor ----


class Processor:
    """A processor as Hugging Face shapes it: the text tokenizer at `.tokenizer`."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer


def test_a_processor_as_processing_class_is_the_trainers_processor(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    processor = Processor(tokenizer)
    trainer = UnslothTrainer(model=model, processing_class=processor, train_dataset=chat_rows, args=quiet_args())
    assert trainer.processor is processor and trainer.processing_class is processor
    assert trainer.tokenizer is tokenizer
    plain = UnslothTrainer(model=model, processing_class=tokenizer, train_dataset=chat_rows, args=quiet_args())
    assert plain.processing_class is tokenizer and plain.processor is None


def test_the_processor_keyword_is_accepted(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    processor = Processor(tokenizer)
    trainer = UnslothTrainer(
        model=model, processing_class=tokenizer, processor=processor, train_dataset=chat_rows, args=quiet_args()
    )
    assert trainer.processor is processor and trainer.processing_class is tokenizer


# ---- 7. a chat template given as text ----


def test_a_template_given_as_text_is_stored_exactly(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, chat_template=("{{ messages }}", "<|eos|>"))
    assert tokenizer.chat_template == "{{ messages }}"
    # The user's template sees the messages as given, list-of-parts content included, as Hugging Face renders it.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert "'type': 'text'" in tokenizer.apply_chat_template(parts, tokenize=False)


# ---- 8. torch.cuda.mem_get_info on an Apple GPU ----


def test_the_total_is_metals_recommended_working_set_in_exact_bytes(monkeypatch) -> None:
    import mlx.core as mx

    from unsloth.mlx.compat import memory

    # What Metal reports on a 32 GB M2 Max (recommendedMaxWorkingSetSize), and the GPU as the default device.
    working_set = 22_906_503_168
    monkeypatch.setattr(
        mx,
        "device_info",
        lambda: {
            "device_name": "Apple M2 Max",
            "memory_size": 34_359_738_368,
            "max_recommended_working_set_size": working_set,
        },
    )
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu))
    free, total = memory.mem_get_info()
    assert total == working_set and 0 <= free <= total
    assert memory.get_device_properties().total_memory == working_set
    # The notebook's GB figure is rounded for printing; the byte count is not.
    assert memory.get_gpu_memory_stats()[2] == 21.333


# ---- 9. the trl stand-in's version ----


def test_the_trl_stand_in_version_parses_as_major_minor_patch() -> None:
    from types import ModuleType

    from packaging.version import Version

    from unsloth.mlx.compat.trl_shim import fill_stand_in

    stand_in = ModuleType("trl")
    fill_stand_in(stand_in)
    assert stand_in.__version__ == "0.0.0+unsloth-mlx"
    assert Version(stand_in.__version__).release == (0, 0, 0)
    # Code that reads the minor version by splitting on dots, as some notebooks do, gets a number.
    assert int(stand_in.__version__.split(".")[1]) == 0
