"""The batch order as upstream's MLX trainer names it, with torch installed: left unset or asked for by name it is
CUDA Unsloth's `torch_randperm`; an explicit "default" is the MLX trainer's own seeded shuffle."""

from __future__ import annotations

import numpy as np

from unsloth import UnslothTrainer
from unsloth_zoo.mlx.data import epoch_batches

from .test_batch_order_torch import RecordingTrainer


def _first_epoch(load_public, chat_rows, quiet_args, **order) -> tuple:
    model, tokenizer = load_public(lora=True)
    trainer = RecordingTrainer(model, quiet_args(max_steps=4, seed=7, **order), None, chat_rows, None, tokenizer)
    trainer.train()
    rows = [row.tolist() for row in trainer.train_rows.source_rows]
    return trainer, rows


def test_unset_and_named_torch_order_read_rows_by_torch_randperm(load_public, chat_rows, quiet_args) -> None:
    import torch

    unset, rows = _first_epoch(load_public, chat_rows, quiet_args)
    named, _ = _first_epoch(load_public, chat_rows, quiet_args, dataset_order="torch_randperm")
    generator = torch.Generator()
    generator.manual_seed(7)
    order = torch.randperm(len(rows), generator=generator).tolist()
    expected = [[rows[index] for index in order[start : start + 2]] for start in range(0, len(rows), 2)]
    assert unset.args.dataset_order == named.args.dataset_order == "torch_randperm"
    assert unset.seen_batches == named.seen_batches == expected


def test_an_explicit_default_is_the_mlx_trainers_own_shuffle(load_public, chat_rows, quiet_args) -> None:
    trainer, rows = _first_epoch(load_public, chat_rows, quiet_args, dataset_order="default")
    assert trainer.args.dataset_order == "default" and trainer.cuda_batch_order is False
    batches = epoch_batches(np.asarray([len(row) for row in rows]), 2, "default", 7, 0)
    assert trainer.seen_batches == [[rows[int(index)] for index in batch] for batch in batches]


def test_streaming_true_reads_in_the_order_given_even_with_torch(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(streaming=True))
    assert trainer.args.dataset_order == "sequential" and trainer.cuda_batch_order is False
