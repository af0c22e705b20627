# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`UnslothTrainer`: the MLX trainer behind the calls CUDA notebooks make to TRL's `SFTTrainer`.

It reads either argument order, refuses at construction what MLX cannot run, settles the context length, and
trains with CUDA Unsloth's public defaults: no appended EOS, global clipping at 1.0 and CUDA Unsloth's batch order.
Already tokenized datasets (`skip_prepare_dataset`), streamed ones and `embedding_learning_rate` are handled in
`train_data` and here.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from unsloth_zoo.mlx.trainer import MLXTrainer, TrainingPlan

from .batch_order import cuda_epoch_order, note_fallback_order, torch_installed
from .collators import check_collator
from .embedding_rate import with_embedding_learning_rate
from .responses_only import response_masked_cross_entropy
from .train_data import prepared_rows, refuse_images
from .train_rows import TrainRows
from .trainer_call import read_trainer_call
from .trainer_config import public_config, resolve_max_seq_length


class UnslothTrainer(MLXTrainer):
    train_rows: TrainRows

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        call = read_trainer_call(args, kwargs)
        check_collator(call.data_collator)
        config = public_config(call.args, call.config_keywords)
        config.max_seq_length = resolve_max_seq_length(config, model)
        skip_prepare = getattr(config, "skip_prepare_dataset", False)
        refuse_images(call.train_dataset, call.eval_dataset)
        train = prepared_rows(call.train_dataset, config, skip_prepare)
        evaluation = prepared_rows(call.eval_dataset, config, skip_prepare)
        if train.streamed and config.dataset_order == "default":
            # Hugging Face reads a streamed dataset in its own order; shuffling is the dataset's job there.
            config.dataset_order = "sequential"
        # The backend walks rows in sequence; this trainer shows them to it in CUDA Unsloth's order each epoch.
        self.cuda_batch_order = config.dataset_order == "default" and torch_installed()
        if config.dataset_order == "default" and not self.cuda_batch_order:
            note_fallback_order()
        if self.cuda_batch_order:
            config.dataset_order = "sequential"
        super().__init__(
            model,
            call.tokenizer,
            train.rows,
            evaluation.rows,
            formatting_func=call.formatting_func,
            args=config,
            callbacks=call.callbacks,
        )
        self.train_rows = TrainRows(self.train_rows)
        if train.masks is not None:
            # Labels already masked to -100 (train_on_responses_only's return_function) become the loss mask.
            self.train_rows.set_masks(train.masks)
        # TRL's attribute names, which notebooks and helpers such as train_on_responses_only read.
        self.processing_class = call.tokenizer
        self.train_dataset = call.train_dataset
        self.eval_dataset = call.eval_dataset
        self.data_collator = call.data_collator

    def _run_epoch(self, epoch: int, first_step: int, plan: TrainingPlan) -> None:
        if self.cuda_batch_order:
            self.train_rows.present(cuda_epoch_order(len(self.train_rows), self.args.seed, epoch))
        super()._run_epoch(epoch, first_step, plan)

    def _create_optimizer(self, max_steps: int) -> None:
        super()._create_optimizer(max_steps)
        rate = getattr(self.args, "embedding_learning_rate", None)
        if rate is not None:
            self.optimizer = with_embedding_learning_rate(self, rate)
            self.callback_handler.optimizer = self.optimizer

    def _build_step_functions(self) -> None:
        super()._build_step_functions()
        rows = self.train_rows
        if rows.masks is None:
            return
        model = self.model
        loss_and_grad = nn.value_and_grad(model, response_masked_cross_entropy)

        # Uncompiled on purpose: each batch's masks come from the rows it read, which a compiled graph would not see.
        def forward_backward(tokens: Any, lengths: Any) -> Any:
            weights = mx.array(rows.take_read_masks(tokens.shape[1]))
            (loss, count), grads = loss_and_grad(model, tokens, lengths, weights)
            return loss, count, grads

        self._forward_backward = forward_backward
