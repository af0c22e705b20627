# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`UnslothTrainer`: the MLX trainer behind the calls CUDA notebooks make to TRL's `SFTTrainer`.

It reads either argument order, refuses at construction what MLX cannot run, and trains with CUDA Unsloth's
public defaults: no appended EOS, global clipping at 1.0 and CUDA Unsloth's batch order. It prints progress as
the Hugging Face `Trainer` does, with transformers' own progress or printer callback.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.data import epoch_batches
from unsloth_zoo.mlx.lora import warn_if_training_without_lora
from unsloth_zoo.mlx.trainer import MLXTrainer

from .arguments import read_trainer_call
from .collated import collated_text_rows, own_collator, refuse_masked_language_modeling
from .embedding_rate import with_embedding_learning_rate
from .own_rows import (
    own_evaluation_rows,
    own_rows_collator,
    refuse_completion_only_loss,
    refuse_predict_with_generate,
)
from .packing import PackedTrainRows, packed_step, refuse_unpackable
from .quantized_training import refuse_quantized_base_without_lora
from ..chat.responses_only import response_masked_cross_entropy
from .train_data import (
    TrainRows,
    cuda_epoch_order,
    prepared_dataset,
    prepared_rows,
    refuse_images,
    settle_order,
)


def _progress_callbacks(config: Any) -> List[Any]:
    """What the Hugging Face `Trainer` adds: a printer when `disable_tqdm`, else a progress bar; none without
    transformers. Unset, `disable_tqdm` follows transformers' verbosity, as `TrainingArguments` resolves it."""
    try:
        callbacks = importlib.import_module("transformers.trainer_callback")
        hf_logging = importlib.import_module("transformers.utils.logging")
    except ImportError:
        return []
    if config.disable_tqdm is None:
        config.disable_tqdm = hf_logging.get_verbosity() > hf_logging.WARNING
    return [callbacks.PrinterCallback if config.disable_tqdm else callbacks.ProgressCallback]


class UnslothTrainer(MLXTrainer):
    train_rows: TrainRows

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        refuse_quantized_base_without_lora(model)
        warn_if_training_without_lora(model)
        call = read_trainer_call(model, args, kwargs)
        config = call.config
        # A kept TRL keyword (arguments.KEPT_KEYWORDS), set by name rather than declared as a field.
        completion_only = getattr(config, "completion_only_loss", None)
        # A collator that encodes its own rows (UnslothVisionDataCollator) is registered by its layer (own_rows).
        self._own_rows, self.vision_collator = own_rows_collator(
            model, call.processor, call.data_collator, call.train_dataset
        )
        refuse_predict_with_generate(self._own_rows, getattr(config, "predict_with_generate", False))
        if self._own_rows is not None:
            train, encoded = self._own_rows.encode(self.vision_collator, call.train_dataset, call.eval_dataset, config)
            self._own_encoded = encoded
            evaluation = own_evaluation_rows(self._own_rows, encoded) or prepared_rows(
                call.eval_dataset, config, config.skip_prepare_dataset
            )
        elif own_collator(call.data_collator):
            refuse_masked_language_modeling(call.data_collator)
            refuse_completion_only_loss(completion_only)
            # A notebook's own collator reads the rows itself, and its batches become the token rows and masks.
            train, evaluation = (
                collated_text_rows(call.data_collator, rows, config, call.tokenizer, call.formatting_func)
                for rows in (call.train_dataset, call.eval_dataset)
            )
        else:
            refuse_completion_only_loss(completion_only)
            refuse_images(call.train_dataset, call.eval_dataset)
            train = prepared_rows(call.train_dataset, config, config.skip_prepare_dataset)
            evaluation = prepared_rows(call.eval_dataset, config, config.skip_prepare_dataset)
        # The backend walks rows as `_epoch_batches` gives them; this trainer shows them in CUDA Unsloth's order.
        self.cuda_batch_order = settle_order(config, train.streamed)
        super().__init__(
            model,
            call.tokenizer,
            train.rows,
            evaluation.rows,
            formatting_func=call.formatting_func,
            args=config,
            callbacks=[*_progress_callbacks(config), *(call.callbacks or [])],
        )
        if self._own_rows is not None:
            self.train_rows = self._own_rows.train_rows(self.train_rows, encoded)
        else:
            self.train_rows = TrainRows(self.train_rows)
        if train.masks is not None and self.vision_collator is None:
            # Labels already masked to -100 (train_on_responses_only's return_function) become the loss mask.
            self.train_rows.set_masks(train.masks)
        if getattr(config, "packing", False):
            self._pack_rows(config)
        # TRL's attribute names, which notebooks and helpers such as train_on_responses_only read.
        self.processing_class, self.processor = call.processing_class, call.processor
        if self.vision_collator is not None and self.processor is None:
            self.processor = getattr(self.vision_collator, "processor", None)
        self.data_collator = self.vision_collator or call.data_collator
        self.show_prepared_rows()
        if self.vision_collator is not None:
            # The vision rows are the processor's, images included: the trainer shows the dataset as given.
            self.train_dataset, self.eval_dataset = call.train_dataset, call.eval_dataset

    def _pack_rows(self, config: Any) -> None:
        """packing=True: the rows as packed sequences of max_seq_length, each row attending only to itself."""
        owner = type(config).__name__
        if self.vision_collator is not None:
            raise NotImplementedError(f"{owner}(packing=True) packs text rows; a vision collator's rows are not packed")
        refuse_unpackable(self.model, owner)
        self.train_rows = PackedTrainRows(self.train_rows, int(config.max_seq_length))

    def show_prepared_rows(self) -> None:
        """Let `train_dataset` / `eval_dataset` show TRL's prepared columns for the rows trained on, built when read."""
        self._prepared: Dict[str, Any] = {}

    # TRL's prepared datasets, built on first read only: most runs never look at them.
    @property
    def train_dataset(self) -> Any:
        if "train" not in self._prepared:
            self._prepared["train"] = prepared_dataset(self.train_rows.source_rows, self.train_rows.masks)
        return self._prepared["train"]

    @train_dataset.setter
    def train_dataset(self, value: Any) -> None:
        self._prepared["train"] = value

    @property
    def eval_dataset(self) -> Any:
        if "eval" not in self._prepared:
            self._prepared["eval"] = None if self.eval_rows is None else prepared_dataset(self.eval_rows.rows)
        return self._prepared["eval"]

    @eval_dataset.setter
    def eval_dataset(self, value: Any) -> None:
        self._prepared["eval"] = value

    def evaluate(self) -> dict:
        # A collator family that evaluates its own rows (Whisper's, with their mel frames) runs its own evaluation.
        own = getattr(self._own_rows, "evaluate", None)
        return super().evaluate() if own is None else own(self, self._own_encoded)

    def predict(
        self, test_dataset: Any, ignore_keys: Any = None, metric_key_prefix: str = "test", **gen_kwargs: Any
    ) -> Any:
        """`Seq2SeqTrainer.predict`, for the collator families that build it (Whisper's); refused for the others."""
        own = getattr(self._own_rows, "predict", None)
        if own is None or ignore_keys is not None:
            raise NotImplementedError(
                "trainer.predict on MLX is built for Whisper's Seq2SeqTrainer only, without ignore_keys; "
                "for this model call trainer.evaluate() or generate with the model"
            )
        return own(self, test_dataset, metric_key_prefix, gen_kwargs)

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        if self.cuda_batch_order:
            self.train_rows.present(cuda_epoch_order(len(self.train_rows), self.args.seed, epoch))
            return epoch_batches(self.train_rows.lengths, self.global_train_batch_size, "sequential", 0, 0)
        return super()._epoch_batches(epoch)

    def _create_optimizer(self, max_steps: int) -> None:
        super()._create_optimizer(max_steps)
        rate = getattr(self.args, "embedding_learning_rate", None)
        if rate is not None:
            self.optimizer = with_embedding_learning_rate(self, rate)
            self.callback_handler.optimizer = self.optimizer

    def _build_step_functions(self) -> None:
        super()._build_step_functions()
        rows = self.train_rows
        if self._own_rows is not None:
            self._forward_backward = self._own_rows.step(self.model, rows)
            return
        if isinstance(rows, PackedTrainRows):
            self._forward_backward = packed_step(self.model, rows)
            return
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
