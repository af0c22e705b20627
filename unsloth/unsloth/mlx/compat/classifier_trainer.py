# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""transformers' `Trainer` given the MLX sequence classifier: the zoo's MLXTrainer with a classifier's rows and step.

Rows are the tokenized dataset's `input_ids` (and `attention_mask`) with `labels` (or `label`), padded per batch to
the longest row as `DataCollatorWithPadding` does; the loss is the model's own (transformers' for `num_labels`).
Evaluation gives `eval_loss` and, with `compute_metrics`, its metrics on the logits and labels, prefixed `eval_`.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

import mlx.core as mx
import numpy as np

from unsloth_zoo.mlx.callbacks import CallbackHandler, FlowCallback, TrainerControl, TrainerState
from unsloth_zoo.mlx.distributed import current_world
from unsloth_zoo.mlx.lora import warn_if_training_without_lora

from ..embeddings.model import padded_width
from ..embeddings.trainer import MeanLossTrainer
from ..training.arguments import trainer_arguments

LABEL_COLUMNS = ("labels", "label")
# transformers' Trainer keywords the MLX classifier trainer cannot honour, refused by name when set.
UNSUPPORTED = ("model_init", "compute_loss_func", "optimizers", "optimizer_cls_and_kwargs", "data_collator")


class ClassifierRows:
    """A tokenized dataset's token rows and labels, as transformers' Trainer keeps them for a classifier."""

    def __init__(self, dataset: Any, owner: str) -> None:
        names = list(dataset.column_names)
        label = next((name for name in LABEL_COLUMNS if name in names), None)
        if "input_ids" not in names or label is None:
            raise ValueError(f"{owner} needs tokenized rows: input_ids and labels (or label); it has {names}")
        self.ids = [list(row) for row in dataset["input_ids"]]
        masks = dataset["attention_mask"] if "attention_mask" in names else None
        self.masks = [list(row) for row in masks] if masks is not None else [[1] * len(row) for row in self.ids]
        self.labels = np.asarray(dataset[label])
        self.lengths = np.array([len(row) for row in self.ids], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def batch(
        self, indices: np.ndarray, pad_id: int, left: bool, multiple: Optional[int] = None
    ) -> Tuple[mx.array, mx.array, mx.array]:
        width = padded_width(int(max(self.lengths[i] for i in indices)), multiple)
        ids = np.full((len(indices), width), pad_id, dtype=np.int32)
        masks = np.zeros((len(indices), width), dtype=np.int32)
        for row, index in enumerate(indices):
            length = int(self.lengths[index])
            place = slice(width - length, width) if left else slice(0, length)
            ids[row, place], masks[row, place] = self.ids[index], self.masks[index]
        labels = self.labels[indices]
        labels = labels.astype(np.int32) if np.issubdtype(labels.dtype, np.integer) else labels.astype(np.float32)
        return mx.array(ids), mx.array(masks), mx.array(labels)


class ClassifierTrainer(MeanLossTrainer):
    train_rows: Any
    eval_rows: Any
    # The zoo's memory check measures a causal-LM pass, which this trainer's step is not.
    probes_causal_lm = False

    def __init__(
        self,
        model: Any,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        compute_metrics: Any = None,
        callbacks: Optional[List[Any]] = None,
        preprocess_logits_for_metrics: Any = None,
        **kwargs: Any,
    ) -> None:
        refused = sorted(name for name in UNSUPPORTED if kwargs.pop(name, None) is not None)
        kwargs.pop("dataset_kwargs", None)
        if refused or kwargs:
            raise NotImplementedError(
                f"Trainer on MLX (sequence classifier) does not support {', '.join(refused + sorted(kwargs))}"
            )
        if train_dataset is None:
            raise ValueError("Trainer on MLX needs a train_dataset")
        warn_if_training_without_lora(model, "Trainer")
        self.args = trainer_arguments(args, {}, model)
        self.model = model
        self.world = current_world()
        self.tokenizer = processing_class if processing_class is not None else model.tokenizer
        self.pad_id = int(getattr(self.tokenizer, "pad_token_id", None) or 0)
        self.left_padding = getattr(self.tokenizer, "padding_side", "right") == "left"
        self.train_rows = ClassifierRows(train_dataset, "train_dataset")
        self.eval_rows = None if eval_dataset is None else ClassifierRows(eval_dataset, "eval_dataset")
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.compute_metrics = compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        if self.eval_rows and self.args.eval_strategy == "no" and getattr(self.args, "eval_strategy_unset", False):
            self.args.eval_strategy = "steps"
        self.optimizer: Any = None
        self.state = self._rank_state(TrainerState())
        self.control = TrainerControl()
        from ..training.trainer import _progress_callbacks

        handlers = [FlowCallback, *_progress_callbacks(self.args), *(callbacks or [])]
        self.callback_handler = CallbackHandler(handlers, model, self.tokenizer)
        self.control = self._fire("on_init_end")

    def compute_loss(self, model: Any, ids: mx.array, masks: mx.array, labels: mx.array) -> mx.array:
        return model(ids, masks, labels).loss

    def _micro_batch(self, indices: np.ndarray) -> Tuple[mx.array, mx.array, mx.array]:
        return self.train_rows.batch(indices, self.pad_id, self.left_padding, self._pad_multiple)

    def predict_rows(self, rows: ClassifierRows) -> Tuple[np.ndarray, np.ndarray, float]:
        """Logits, labels and the row-weighted mean loss over `rows`, in their order, in eval mode."""
        was_training = self.model.training
        self.model.eval()
        size = self.args.per_device_eval_batch_size
        logits, total = [], 0.0
        for start in range(0, len(rows), size):
            indices = np.arange(start, min(start + size, len(rows)))
            ids, masks, labels = rows.batch(indices, self.pad_id, self.left_padding)
            output = self.model(ids, masks, labels)
            batch_logits = output.logits
            if self.preprocess_logits_for_metrics is not None:
                batch_logits = self.preprocess_logits_for_metrics(batch_logits, labels)
            logits.append(np.array(batch_logits.astype(mx.float32)))
            total += output.loss.item() * len(indices)
            self._fire("on_prediction_step")
        self.model.train(was_training)
        return np.concatenate(logits), rows.labels, total / len(rows)

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False) -> None:
        """transformers' save_model: the model's own save_pretrained (PEFT's layout for LoRA) and the tokenizer."""
        if self.world.is_main:
            folder = output_dir or self.args.output_dir
            self.model.save_pretrained(folder)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(folder)

    def evaluate(self, eval_dataset: Any = None, **kwargs: Any) -> dict:
        """transformers' evaluate: eval_loss, then compute_metrics(EvalPrediction) under `eval_` names."""
        start = time.time()
        rows = self.eval_rows if eval_dataset is None else ClassifierRows(eval_dataset, "eval_dataset")
        if not rows:
            raise ValueError("Trainer.evaluate on MLX needs an eval_dataset")
        predictions, labels, loss = self.predict_rows(rows)
        metrics: Dict[str, Any] = {"eval_loss": loss}
        if self.compute_metrics is not None:
            from transformers import EvalPrediction

            found = self.compute_metrics(EvalPrediction(predictions=predictions, label_ids=labels))
            metrics.update(
                {name if name.startswith("eval_") else f"eval_{name}": value for name, value in found.items()}
            )
        metrics["eval_runtime"] = round(time.time() - start, 4)
        metrics["epoch"] = self.state.epoch
        self.log(metrics)
        self._fire("on_evaluate", metrics=metrics)
        return metrics
