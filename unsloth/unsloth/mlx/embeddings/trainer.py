# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`EmbeddingTrainer`: the MLX trainer behind sentence-transformers' `SentenceTransformerTrainer`.

It is the zoo's `MLXTrainer` (optimizer, schedule, clipping, callbacks, logging, checkpoints) with the rows and the
step an embedding loss needs: each row is a tuple of texts (anchor, positive, negatives...), each column embedded
with its prompt, and the loss is the notebook's sentence-transformers loss computed in MLX (`losses.py`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from unsloth_zoo.mlx.callbacks import CallbackHandler, FlowCallback, TrainerControl, TrainerState
from unsloth_zoo.mlx.distributed import current_world
from unsloth_zoo.mlx.lora import warn_if_training_without_lora
from unsloth_zoo.mlx.optim import clip_gradients
from unsloth_zoo.mlx.trainer import MLXTrainer

from ..training.arguments import foreign_keywords, trainer_arguments
from .losses import embedding_loss

# Columns sentence-transformers reads as the label, never as text.
LABEL_COLUMNS = ("label", "score")
# SentenceTransformerTrainingArguments' own fields, read here rather than by the MLX arguments.
ST_FIELDS = ("batch_sampler", "multi_dataset_batch_sampler", "prompts", "router_mapping", "learning_rate_mapping")
SAMPLERS = ("batch_sampler", "no_duplicates")
# SentenceTransformerTrainer keywords the MLX trainer cannot honour, refused by name when set.
UNSUPPORTED_KEYWORDS = (
    "model_init",
    "compute_metrics",
    "optimizers",
    "optimizer_cls_and_kwargs",
    "preprocess_logits_for_metrics",
    "data_collator",
)


class EmbeddingRows:
    """A dataset's text columns (in its order) and label column, as ST reads them."""

    def __init__(self, dataset: Any, owner: str = "train_dataset") -> None:
        if isinstance(dataset, dict):
            raise NotImplementedError(f"{owner} as a dict of datasets is not supported by the MLX trainer")
        names = list(dataset.column_names)
        self.columns = [name for name in names if name not in LABEL_COLUMNS]
        self.label = next((name for name in names if name in LABEL_COLUMNS), None)
        self.texts = {name: list(dataset[name]) for name in self.columns}
        self.labels = None if self.label is None else np.asarray(dataset[self.label], dtype=np.float32)
        # MLXTrainer's plans count rows through `lengths`.
        self.lengths = np.ones(len(self), dtype=np.int64)
        # Each column's token ids per row, kept once tokenized (None until then).
        self.tokens: Dict[str, List[Any]] = {name: [None] * len(self) for name in self.columns}

    def __len__(self) -> int:
        return len(self.texts[self.columns[0]]) if self.columns else 0

    def tokenize(self, model: Any, prompts: List[str], indices: Any = None, chunk: int = 1024) -> None:
        """Keep each row's token ids per column (all rows when `indices` is None), so a step only pads them."""
        if indices is None:
            self.tokens = {name: [None] * len(self) for name in self.columns}
            indices = range(len(self))
        for start in range(0, len(indices), chunk):
            part = indices[start : start + chunk]
            for name, prompt in zip(self.columns, prompts):
                rows = model.token_rows([self.texts[name][i] for i in part], prompt)
                for index, row in zip(part, rows):
                    self.tokens[name][index] = row

    def batch(
        self, indices: np.ndarray, model: Any, prompts: List[str], multiple: Optional[int] = None
    ) -> Tuple[List[Any], Optional[mx.array]]:
        """Each column's padded token batch (rows tokenized on first use; widths rounded up to `multiple`), and the
        labels."""
        missing = [int(i) for i in indices if self.tokens[self.columns[0]][i] is None]
        if missing:
            self.tokenize(model, prompts, missing)
        columns = [
            model.token_batch([self.tokens[name][i] for i in indices], prompt, multiple)
            for name, prompt in zip(self.columns, prompts)
        ]
        labels = None if self.labels is None else mx.array(self.labels[indices])
        return columns, labels


def no_duplicate_batches(rows: EmbeddingRows, batch_size: int, seed: int, epoch: int) -> List[np.ndarray]:
    """ST's NO_DUPLICATES idea: seeded order, and a row whose text is already in the batch waits for a later one."""
    waiting = list(np.random.default_rng((seed, epoch)).permutation(len(rows)))
    batches = []
    while waiting:
        batch: List[int] = []
        seen: Set[str] = set()
        later: List[int] = []
        for index in waiting:
            texts = {rows.texts[name][index] for name in rows.columns}
            if len(batch) < batch_size and not texts & seen:
                batch.append(index)
                seen |= texts
            else:
                later.append(index)
        batches.append(np.array(batch))
        waiting = later
    return batches


def _column_prompts(prompts: Any, columns: List[str]) -> List[str]:
    if prompts is None:
        return [""] * len(columns)
    if isinstance(prompts, str):
        return [prompts] * len(columns)
    if any(isinstance(value, dict) for value in prompts.values()):
        raise NotImplementedError("prompts per dataset (a nested dict) are not supported by the MLX trainer")
    return [prompts.get(name, "") for name in columns]


def embedding_arguments(args: Any, model: Any) -> Tuple[Any, Dict[str, Any]]:
    """The MLX trainer's arguments from SentenceTransformerTrainingArguments, and ST's own fields beside them."""
    if args is None:
        keywords: Dict[str, Any] = {"output_dir": "checkpoints/model"}
    elif isinstance(args, dict):
        keywords = dict(args)
    else:
        keywords = foreign_keywords(args)
    own = {name: keywords.pop(name) for name in ST_FIELDS if name in keywords}
    # Transformers 5 leaves warmup_ratio None (a fractional warmup_steps replaced it); None means no ratio.
    if keywords.get("warmup_ratio") is None:
        keywords.pop("warmup_ratio", None)
    for name in ("router_mapping", "learning_rate_mapping"):
        if own.get(name):
            raise NotImplementedError(f"SentenceTransformerTrainingArguments({name}=...) is not supported on MLX")
    sampler = str(getattr(own.get("batch_sampler"), "value", own.get("batch_sampler") or "batch_sampler"))
    if sampler not in SAMPLERS:
        raise NotImplementedError(
            f"batch_sampler={sampler!r} is not supported on MLX (supported: {', '.join(SAMPLERS)})"
        )
    own["batch_sampler"] = sampler
    return trainer_arguments(keywords, {}, model), own


class MeanLossTrainer(MLXTrainer):
    """The zoo's MLXTrainer for a loss over whole rows (an embedding loss, a classifier's): shuffled batches, and a
    step whose loss is each micro-batch's mean averaged over its micro-batches, as transformers' Trainer scales it.
    A subclass gives `compute_loss(model, *inputs)` and `_micro_batch(indices)`, the inputs after the model."""

    def _micro_batch(self, indices: np.ndarray) -> Tuple[Any, ...]:
        raise NotImplementedError

    compute_loss: Callable[..., mx.array]  # each subclass defines it over its own micro-batch inputs

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        order = np.random.default_rng((self.args.seed, epoch)).permutation(len(self.train_rows))
        size = self.global_train_batch_size
        return [order[start : start + size] for start in range(0, len(order), size)]

    def _build_step_functions(self) -> None:
        model, optimizer, args = self.model, self.optimizer, self.args
        loss_and_grad = nn.value_and_grad(model, self.compute_loss)

        def accumulate(grads: Any, loss_sum: Any, *inputs: Any) -> Tuple[Any, mx.array]:
            loss, micro_grads = loss_and_grad(model, *inputs)
            if grads is None:
                return micro_grads, loss
            return tree_map(mx.add, grads, micro_grads), loss_sum + loss

        def step(grads: Any, loss_sum: Any, count: int, *inputs: Any) -> Tuple[mx.array, mx.array]:
            grads, loss_sum = accumulate(grads, loss_sum, *inputs)
            if count > 1:
                grads = tree_map(lambda gradient: gradient / count, grads)
            grads, grad_norm = clip_gradients(grads, args.grad_clip_mode, args.max_grad_norm, args.max_grad_value)
            optimizer.update(model, grads)
            return loss_sum / count, grad_norm

        # Compiled as the zoo's trainer decides (on a GPU, or `mx_compile=True`), one trace per width bucket, as
        # mlx-embeddings-lora's step: on CPU it took a step's process time from 127 to 109 ms (hidden 64, 2 layers,
        # 32 tokens) and 4.3 to 4.1 s (hidden 256, 4 layers, 64 tokens), against each gradient evaluated alone.
        if self._use_compile():
            captured = [model.state, optimizer.state, mx.random.state]
            accumulate = mx.compile(accumulate, inputs=captured, outputs=captured)
            step = mx.compile(step, inputs=captured, outputs=captured)
        self._accumulate, self._step = accumulate, step

    def _run_epoch(self, epoch: int, first_step: int, plan: Any) -> None:
        """The zoo's epoch, with each step's loss, gradients, clipping and update as one compiled call evaluated
        once (micro-batches before the last are summed and evaluated one by one, so memory holds one at a time)."""
        if self.world.is_distributed:
            raise NotImplementedError(f"{type(self).__name__} on MLX trains in one process, not across ranks")
        args = self.args
        batches = self._epoch_batches(epoch)
        self.callback_handler.train_dataloader = batches
        accumulation = args.gradient_accumulation_steps
        grad_norm, learning_rate = None, None
        for step_in_epoch in range(first_step, plan.steps_per_epoch):
            # The epoch's last step takes whatever micro-batches remain, even fewer than the accumulation count.
            group = batches[step_in_epoch * accumulation : (step_in_epoch + 1) * accumulation]
            self._fire("on_step_begin")
            # Randomness (dropout) is a function of the step, so a resumed run draws what the uninterrupted one did.
            mx.random.seed(args.seed + self.state.global_step)
            grads, loss_sum = None, None
            for indices in group[:-1]:
                grads, loss_sum = self._accumulate(grads, loss_sum, *self._micro_batch(indices))
                self._samples_seen += len(indices)
                mx.eval(grads, loss_sum)
                self._fire("on_substep_end")
            inputs = self._micro_batch(group[-1])
            self._samples_seen += len(group[-1])
            self._fire("on_pre_optimizer_step")
            learning_rate = self._rates[min(self.state.global_step, len(self._rates) - 1)]
            step_loss, grad_norm = self._step(grads, loss_sum, len(group), *inputs)
            self._running_loss = self._running_loss + step_loss
            del grads  # else this step's gradients stay alive through the next step's backward pass
            mx.eval(self._running_loss, grad_norm, self.model.state, self.optimizer.state)
            self._fire("on_optimizer_step")
            self.state.global_step += 1
            self.state.epoch = epoch + (step_in_epoch * accumulation + len(group)) / plan.batches_per_epoch
            self._fire("on_step_end")
            self._log_evaluate_save(grad_norm, learning_rate)
            if self.control.should_epoch_stop or self.control.should_training_stop:
                break
        self._fire("on_epoch_end")
        self._log_evaluate_save(grad_norm, learning_rate)


class EmbeddingTrainer(MeanLossTrainer):
    # Rows of texts (EmbeddingRows), where the base trainer holds token rows.
    train_rows: Any
    eval_rows: Any
    # The zoo's memory check measures a causal-LM pass, which this trainer's step is not.
    probes_causal_lm = False

    def __init__(
        self,
        model: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        loss: Any = None,
        evaluator: Any = None,
        callbacks: Optional[List[Any]] = None,
        **kwargs: Any,
    ) -> None:
        set_keywords = sorted(name for name in UNSUPPORTED_KEYWORDS if kwargs.pop(name, None) is not None)
        if set_keywords:
            raise NotImplementedError(f"SentenceTransformerTrainer on MLX does not support {', '.join(set_keywords)}")
        kwargs.pop("tokenizer", None), kwargs.pop("processing_class", None), kwargs.pop("model_card_data", None)
        if kwargs:
            raise NotImplementedError(f"SentenceTransformerTrainer on MLX does not support {', '.join(sorted(kwargs))}")
        if train_dataset is None:
            raise ValueError("SentenceTransformerTrainer on MLX needs a train_dataset")
        warn_if_training_without_lora(model, "SentenceTransformerTrainer")
        # Built before anything is set, so a refused loss leaves no half-made trainer.
        self.loss_function = embedding_loss(loss)
        self.loss = loss
        self.args, settings = embedding_arguments(args, model)
        self.sampler = settings["batch_sampler"]
        self.model = model
        self.world = current_world()
        self.tokenizer = model.tokenizer
        self.train_rows = EmbeddingRows(train_dataset)
        self.eval_rows = None if eval_dataset is None else EmbeddingRows(eval_dataset, "eval_dataset")
        self.train_dataset, self.eval_dataset, self.evaluator = train_dataset, eval_dataset, evaluator
        self.prompts = _column_prompts(settings.get("prompts"), self.train_rows.columns)
        if (self.eval_rows or evaluator is not None) and self.args.eval_strategy == "no":
            if getattr(self.args, "eval_strategy_unset", False):
                self.args.eval_strategy = "steps"
        self.pad_id = 0
        self.optimizer: Any = None
        self.state = self._rank_state(TrainerState())
        self.control = TrainerControl()
        from ..training.trainer import _progress_callbacks

        handlers = [FlowCallback, *_progress_callbacks(self.args), *(callbacks or [])]
        self.callback_handler = CallbackHandler(handlers, model, self.tokenizer)
        self.control = self._fire("on_init_end")

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        if self.sampler == "no_duplicates":
            return no_duplicate_batches(self.train_rows, self.global_train_batch_size, self.args.seed, epoch)
        return super()._epoch_batches(epoch)

    def compute_loss(self, model: Any, columns: List[Any], labels: Optional[mx.array]) -> mx.array:
        """The loss over each column's token batch (`EmbeddingRows.batch`)."""
        return self.loss_function([model(*batch) for batch in columns], labels)

    def _train(self, resume_from_checkpoint: Any) -> Any:
        # Every row is tokenized once, ahead of the steps, as mlx-embeddings-lora's rows come already tokenized.
        self.train_rows.tokenize(self.model, self.prompts)
        return super()._train(resume_from_checkpoint)

    def _micro_batch(self, indices: np.ndarray) -> Tuple[Any, ...]:
        columns, labels = self.train_rows.batch(indices, self.model, self.prompts, self._pad_multiple)
        # Every column's tokens without padding (read from the kept rows: no wait on the device), what
        # `train_tokens_per_second` counts.
        rows = self.train_rows.tokens
        self.state.num_input_tokens_seen += sum(len(rows[name][index]) for name in rows for index in indices)
        return columns, labels

    def evaluate(self) -> dict:
        """The eval loss over the eval rows (batch means weighted by rows), and the evaluator's metrics if given."""
        start = time.time()
        metrics: Dict[str, Any] = {}
        self.model.eval()
        if self.eval_rows:
            size = self.args.per_device_eval_batch_size
            order = np.arange(len(self.eval_rows))
            total = 0.0
            for begin in range(0, len(order), size):
                indices = order[begin : begin + size]
                columns, labels = self.eval_rows.batch(indices, self.model, self.prompts)
                total += self.compute_loss(self.model, columns, labels).item() * len(indices)
                self._fire("on_prediction_step")
            metrics["eval_loss"] = total / len(self.eval_rows)
        if self.evaluator is not None:
            scores = self.evaluator(self.model)
            metrics.update(
                {name if name.startswith("eval_") else f"eval_{name}": value for name, value in scores.items()}
            )
        self.model.train()
        metrics["eval_runtime"] = round(time.time() - start, 4)
        self.log(metrics)
        self._fire("on_evaluate", metrics=metrics)
        return metrics
