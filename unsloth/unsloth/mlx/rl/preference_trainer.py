# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What DPO and ORPO share on MLX: reading the call, the pair rows, the batches, the step and TRL's metric logs.

The zoo's `MLXTrainer` runs the loop, so callbacks, schedules, clipping and checkpoints are SFT's. A method
subclass says how a row becomes a pair (`pair`), how a pair becomes its two sequences (`sequences`) and what a
batch's loss and metrics are (`loss_and_metrics`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.chunked_loss import TokenScores, token_scores
from unsloth_zoo.mlx.data import TokenizedRows, epoch_batches
from unsloth_zoo.mlx.trainer import MLXTrainer

from ..models.keywords import MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, model_context_limit
from ..training.arguments import is_training_arguments, read_trainer_call
from ..training.quantized_training import refuse_quantized_base_without_lora
from ..training.train_data import cuda_epoch_order, settle_order
from ..training.trainer import _progress_callbacks
from .config import RLTrainingArguments, method_arguments
from .preference_data import PreferencePair, checked_rows

Sequence = Tuple[List[int], int]
# TRL's DPO and ORPO configs cut each sequence at this many tokens unless told otherwise.
TRL_MAX_LENGTH = 1024


class PairRows(TokenizedRows):
    """One row per pair for the zoo's batching: the row holds the pair's index, its length both sequences' tokens."""

    def __init__(self, pairs: List[PreferencePair], sequences: Any) -> None:
        self.pairs = pairs
        self.sequences = [sequences(pair) for pair in pairs]
        self.rows = [np.array([index], dtype=np.int32) for index in range(len(pairs))]
        self.lengths = np.array([len(chosen[0]) + len(rejected[0]) for chosen, rejected in self.sequences])


class PairBatch(NamedTuple):
    tokens: mx.array  # (2B, W): B chosen sequences, then their B rejected ones, right-padded
    targets: mx.array  # (2B, W - 1): inside each sequence's length
    completion: mx.array  # (2B, W - 1): targets that are completion tokens
    real: mx.array  # (2B, W - 1): input positions that hold a token rather than padding
    pairs: int
    # (2B, C): each sequence's completion targets, left-aligned, then its last one repeated; C is the longest count.
    answer_positions: mx.array
    answer_mask: mx.array  # (2B, C): which of those places are the sequence's own completion targets


def _rounded(size: int, multiple: Optional[int]) -> int:
    return -(-size // multiple) * multiple if multiple else size


def pair_batch(sequences: List[Tuple[Sequence, Sequence]], pad_id: int, multiple: Optional[int] = None) -> PairBatch:
    rows = [chosen for chosen, _ in sequences] + [rejected for _, rejected in sequences]
    width = _rounded(max(len(ids) for ids, _ in rows), multiple)
    # Target position t predicts token t + 1, so the completion's first token is target start - 1.
    firsts = [max(start - 1, 0) for _, start in rows]
    counts = [max(len(ids) - 1 - first, 0) for (ids, _), first in zip(rows, firsts)]
    answers = _rounded(max(max(counts), 1), multiple)
    tokens = np.full((len(rows), width), pad_id, dtype=np.int32)
    targets = np.zeros((len(rows), width - 1), dtype=np.float32)
    completion = np.zeros_like(targets)
    real = np.zeros(targets.shape, dtype=bool)
    answer_positions = np.zeros((len(rows), answers), dtype=np.int32)
    answer_mask = np.zeros((len(rows), answers), dtype=np.float32)
    for slot, ((ids, _), first, count) in enumerate(zip(rows, firsts, counts)):
        tokens[slot, : len(ids)] = ids
        targets[slot, : len(ids) - 1] = 1
        real[slot, : len(ids)] = True
        completion[slot, first : first + count] = 1
        answer_positions[slot] = np.minimum(first + np.arange(answers), max(first + count - 1, 0))
        answer_mask[slot, :count] = 1
    return PairBatch(
        mx.array(tokens),
        mx.array(targets),
        mx.array(completion),
        mx.array(real),
        len(sequences),
        mx.array(answer_positions),
        mx.array(answer_mask),
    )


class PaddingMask:
    """Stands in for mlx_lm's per-layer cache only to hand the model a mask that hides right padding from attention.

    Real tokens see what the causal mask shows them either way; a padding position then attends to the real tokens
    only, as Hugging Face models do with an `attention_mask`, so logits averaged over padding agree with TRL's.
    """

    offset = 0

    def __init__(self, real: mx.array) -> None:
        width = real.shape[1]
        causal = mx.tril(mx.ones((width, width), dtype=mx.bool_))
        self.mask = causal[None, None] & real[:, None, None, :]

    def make_mask(self, length: int, return_array: bool = False, window_size: Any = None) -> mx.array:
        if window_size:
            band = mx.triu(mx.ones((length, length), dtype=mx.bool_), k=-(window_size - 1))
            return self.mask & band[None, None]
        return self.mask

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> Tuple[mx.array, mx.array]:
        return keys, values


def token_log_probs(
    model: Any, tokens: mx.array, real: Any = None, statistics: bool = False, differentiable: bool = True
) -> TokenScores:
    """Each target token's log-probability under `model` (and, with `statistics`, the logits' entropy, mean and
    argmax hit per position), a chunk of positions at a time; `real` (a mask of the input positions that are
    not padding) hides the padding from attention."""
    inputs = tokens[:, :-1]
    cache = None if real is None else [PaddingMask(real)] * len(model.layers)
    return token_scores(model, inputs, tokens[:, 1:], cache=cache, statistics=statistics, differentiable=differentiable)


def _split_call(kind: type, positionals: Tuple[Any, ...], keywords: Dict[str, Any]) -> Tuple[Tuple[Any, ...], Any]:
    """The call with its `args` (by keyword or TRL's second place) replaced by the method config."""
    if "args" in keywords:
        keywords["args"] = method_arguments(kind, keywords["args"])
        return positionals, keywords["args"]
    if positionals and (positionals[0] is None or is_training_arguments(positionals[0])):
        config = method_arguments(kind, positionals[0])
        return (config, *positionals[1:]), config
    keywords["args"] = method_arguments(kind, None)
    return positionals, keywords["args"]


def disable_dropout(model: Any) -> None:
    """TRL's `disable_dropout=True`: every dropout layer of the model (LoRA's included) becomes a no-op."""
    for _, module in model.named_modules():
        for key, child in list(module.items()):
            if isinstance(child, nn.Dropout):
                module[key] = nn.Dropout(0.0)


def _sequence_limit(model: Any, requested: Any) -> int:
    """TRL's `max_length` (1024 when not given) for each sequence, never past what the model was loaded for."""
    value = TRL_MAX_LENGTH if requested is None else int(requested)
    limits = [model_context_limit(model), getattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, None)]
    return min([value, *(int(limit) for limit in limits if limit)])


class PreferenceTrainer(MLXTrainer):
    """TRL's preference trainer call on MLX; subclasses set `config_class` and the method's pieces."""

    config_class: ClassVar[type] = RLTrainingArguments
    uses_reference: ClassVar[bool] = False
    # Whether the step may be compiled: only for a method whose loss and metrics ignore the padding's width.
    compiles_step: ClassVar[bool] = False

    def __init__(self, model: Any, *args: Any, ref_model: Any = None, **kwargs: Any) -> None:
        name = type(self).__name__
        refuse_quantized_base_without_lora(model)
        method_names = {*self.config_class.METHOD_KEYWORDS, *self.config_class.ACCEPTED_AT_DEFAULT}
        overrides = {key: kwargs.pop(key) for key in list(kwargs) if key in method_names}
        args, given = _split_call(self.config_class, args, kwargs)
        length = next((kwargs[key] for key in ("max_length", "max_seq_length") if kwargs.get(key) is not None), None)
        call = read_trainer_call(model, args, kwargs)
        config = call.config
        config.max_seq_length = _sequence_limit(model, length if length is not None else given.max_seq_length)
        for key, value in {**given.method_values(), **overrides}.items():
            setattr(config, key, value)
        if overrides:
            # Trainer-level keywords go through the same checks as the config's own.
            self.config_class(dict(config.to_dict(), **config.method_values()))
        config.check_method_keywords()
        rows = checked_rows(call.train_dataset)
        if config.disable_dropout:
            disable_dropout(model)
        pairs = [self.pair(call.tokenizer, row, config) for row in rows]
        kept = [pair for pair in pairs if self.keeps(pair, config)]
        if not kept:
            raise ValueError(f"{name}: every train_dataset row's prompt fills max_length={config.max_seq_length}")
        self.ref_model = ref_model
        self._config_for_pairs = config
        train = PairRows(kept, self._sequences)
        evaluation = None
        if call.eval_dataset is not None:
            eval_pairs = [
                self.pair(call.tokenizer, row, config) for row in checked_rows(call.eval_dataset, "eval_dataset")
            ]
            evaluation = PairRows([pair for pair in eval_pairs if self.keeps(pair, config)], self._sequences)
        self.cuda_batch_order = settle_order(config, False)
        super().__init__(
            model,
            call.tokenizer,
            train,
            evaluation,
            args=config,
            callbacks=[*_progress_callbacks(config), *(call.callbacks or [])],
        )
        self.processing_class = call.tokenizer
        self.train_dataset = call.train_dataset
        self.eval_dataset = call.eval_dataset
        self._stored: Dict[str, List[float]] = defaultdict(list)
        self._total_tokens = 0

    def _sequences(self, pair: PreferencePair) -> Tuple[Sequence, Sequence]:
        return self.sequences(pair, self._config_for_pairs)

    # ---- what a method provides ----

    def pair(self, tokenizer: Any, row: dict, config: Any) -> PreferencePair:
        raise NotImplementedError

    def keeps(self, pair: PreferencePair, config: Any) -> bool:
        return True

    def sequences(self, pair: PreferencePair, config: Any) -> Tuple[Sequence, Sequence]:
        prompt = list(pair.prompt_ids)
        return (prompt + list(pair.chosen_ids), len(prompt)), (prompt + list(pair.rejected_ids), len(prompt))

    def loss_and_metrics(self, model: Any, batch: PairBatch, reference: Any) -> Tuple[mx.array, Dict[str, mx.array]]:
        raise NotImplementedError

    def reference_values(self, batch: PairBatch) -> Any:
        """The reference policy's values for the batch, left lazy (the step may be a compiled trace)."""
        return None

    # ---- the step ----

    def _build_step_functions(self) -> None:
        super()._build_step_functions()
        model = self.model
        loss_and_grad = nn.value_and_grad(model, self.loss_and_metrics)
        rows: PairRows = self.train_rows  # type: ignore[assignment]
        compiled = self.compiles_step and self._use_compile()
        # A compiled step retraces for each new width, so widths are rounded to a few buckets then.
        multiple = 32 if compiled else None

        def step(tokens: mx.array, targets: mx.array, completion: mx.array, real: mx.array, *answers: mx.array) -> Any:
            batch = PairBatch(tokens, targets, completion, real, tokens.shape[0] // 2, *answers)
            # In the step's own graph (and trace, when compiled), as mlx-lm-lora's reference pass is.
            reference = self.reference_values(batch)
            (loss, metrics), grads = loss_and_grad(model, batch, reference)
            return loss, metrics, grads

        if compiled:
            captured = [model.state, self.optimizer.state, mx.random.state]
            step = mx.compile(step, inputs=captured, outputs=captured)

        # The batch is built outside the step from the pairs the zoo's batching picked (their indices in column 0).
        def forward_backward(tokens: mx.array, lengths: mx.array) -> Any:
            indices = np.array(tokens[:, 0]).tolist()
            batch = pair_batch([rows.sequences[index] for index in indices], self.pad_id, multiple)
            loss, metrics, grads = step(
                batch.tokens, batch.targets, batch.completion, batch.real, batch.answer_positions, batch.answer_mask
            )
            mx.eval(loss, metrics)
            self._store(metrics, batch)
            return loss, mx.array(batch.pairs), grads

        self._forward_backward = forward_backward

    def _epoch_batches(self, epoch: int) -> List[np.ndarray]:
        """CUDA Unsloth's batch order (torch's seeded randperm) unless another order was asked for, as in SFT."""
        if not self.cuda_batch_order:
            return super()._epoch_batches(epoch)
        order = np.array(cuda_epoch_order(len(self.train_rows), self.args.seed, epoch))
        size = self.args.per_device_train_batch_size
        return [order[start : start + size] for start in range(0, len(order), size)]

    def _store(self, metrics: Dict[str, mx.array], batch: PairBatch) -> None:
        for key, value in metrics.items():
            self._stored[key].append(float(value.item()))

    def evaluate(self) -> dict:
        """TRL's eval logs: `eval_loss` (batch means weighted by rows) and each metric's mean over the batches."""
        if not self.eval_rows:
            raise ValueError("evaluation needs an eval_dataset")
        rows: PairRows = self.eval_rows  # type: ignore[assignment]
        batches = epoch_batches(rows.lengths, self.args.per_device_eval_batch_size, "sequential", 0, 0)
        self.callback_handler.eval_dataloader = batches
        self.model.eval()
        start = time.time()
        losses: List[float] = []
        stored: Dict[str, List[float]] = defaultdict(list)
        for indices in batches:
            batch = pair_batch([rows.sequences[int(index)] for index in indices], self.pad_id)
            loss, metrics = self.loss_and_metrics(self.model, batch, self.reference_values(batch))
            mx.eval(loss, metrics)
            losses += [float(loss.item())] * len(indices)
            for key, value in metrics.items():
                stored[key].append(float(value.item()))
            self._fire("on_prediction_step")
        self.model.train()
        runtime = time.time() - start
        results = {"eval_loss": math.fsum(losses) / len(losses)}
        results.update({f"eval_{key}": sum(values) / len(values) for key, values in stored.items()})
        results.update({f"eval_{key}": value for key, value in self.eval_extras().items()})
        results["eval_runtime"] = round(runtime, 4)
        if runtime > 0:
            results["eval_samples_per_second"] = round(len(rows) / runtime, 3)
            results["eval_steps_per_second"] = round(len(batches) / runtime, 3)
        self.log(results)
        self._fire("on_evaluate", metrics=results)
        return results

    def eval_extras(self) -> Dict[str, float]:
        """Values a method logs at evaluation besides its batch metrics."""
        return {}

    def log(self, logs: dict) -> None:
        """TRL's metrics, each averaged over the micro-batches since the last log, join the training logs."""
        if "loss" in logs:
            for key, values in self._stored.items():
                logs[key] = sum(values) / len(values)
            self._stored.clear()
        super().log(logs)
