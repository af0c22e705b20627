# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Read an `UnslothTrainer(...)` call written either way: the MLX order or TRL's `SFTTrainer` order.

The MLX order is `(model, tokenizer, train_dataset, eval_dataset)`; TRL's is `(model, args, data_collator,
train_dataset, eval_dataset, processing_class, ...)`. The second positional tells them apart: training arguments
mean TRL's order, anything else is a tokenizer; a None there is TRL's `args=None` unless a dataset follows it.
Keywords TRL accepts but MLX cannot honour are refused here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from unsloth_zoo.mlx.config import MLXTrainingConfig

from .arguments import KNOWN_KEYWORDS

MLX_ORDER = ("tokenizer", "train_dataset", "eval_dataset")
TRL_ORDER = ("args", "data_collator", "train_dataset", "eval_dataset", "processing_class")
OWN_KEYWORDS = frozenset({*MLX_ORDER, *TRL_ORDER, "formatting_func", "callbacks"})

# Each TRL keyword the MLX trainer cannot honour, and what to do instead; None (or all-None pairs) means unused.
REFUSED_KEYWORDS: Dict[str, str] = {
    "peft_config": "put LoRA on the model with FastLanguageModel.get_peft_model(model, ...) before the trainer",
    "compute_metrics": "the MLX trainer reports eval_loss and eval_perplexity only",
    "compute_loss_func": "the MLX trainer uses its next-token loss (train_on_responses_only masks it)",
    "optimizers": "choose the optimizer with optim= and lr_scheduler_type= in the arguments",
    "optimizer_cls_and_kwargs": "choose the optimizer with optim= in the arguments",
    "preprocess_logits_for_metrics": "the MLX trainer computes no metrics from logits",
    "model_init": "pass the model itself",
    "quantization_config": "load the model with FastLanguageModel.from_pretrained instead",
}


class TrainerCall(NamedTuple):
    tokenizer: Any
    args: Any
    train_dataset: Any
    eval_dataset: Any
    data_collator: Any
    formatting_func: Any
    callbacks: Optional[List[Any]]
    config_keywords: Dict[str, Any]


def is_training_arguments(value: Any) -> bool:
    """Our config, a dict of keywords, or a dataclass carrying `output_dir` (Hugging Face's or TRL's arguments)."""
    if isinstance(value, (MLXTrainingConfig, Mapping)):
        return True
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "output_dir")


def looks_like_dataset(value: Any) -> bool:
    """Rows of data (a datasets.Dataset, a list of rows), as opposed to a data collator, which is called."""
    return value is not None and not callable(value) and (hasattr(value, "__len__") or hasattr(value, "__iter__"))


def _positional_names(positionals: Tuple[Any, ...]) -> Tuple[str, ...]:
    if not positionals:
        return ()
    second = positionals[0]
    if second is None:
        # (model, None, dataset) can only be the MLX order with the tokenizer left out; otherwise None is args.
        mlx_order = len(positionals) > 1 and looks_like_dataset(positionals[1])
        order = MLX_ORDER if mlx_order else TRL_ORDER
    else:
        order = TRL_ORDER if is_training_arguments(second) else MLX_ORDER
    if len(positionals) > len(order):
        raise TypeError(
            f"UnslothTrainer takes at most {len(order) + 1} positional arguments in the "
            f"{'TRL' if order is TRL_ORDER else 'MLX'} order (model, {', '.join(order)}); pass the rest by keyword"
        )
    return order[: len(positionals)]


def _unused(value: Any) -> bool:
    """None, or TRL's `optimizers=(None, None)` default."""
    return value is None or (isinstance(value, (tuple, list)) and all(item is None for item in value))


def _refuse(keywords: Dict[str, Any]) -> None:
    refused = [name for name in REFUSED_KEYWORDS if name in keywords and not _unused(keywords[name])]
    if refused:
        hints = "; ".join(f"{name}: {REFUSED_KEYWORDS[name]}" for name in refused)
        raise NotImplementedError(f"UnslothTrainer on MLX does not support {', '.join(refused)} ({hints})")


def read_trainer_call(positionals: Tuple[Any, ...], keywords: Dict[str, Any]) -> TrainerCall:
    """Sort the call's values by meaning; TypeError for a malformed call, NotImplementedError for what MLX can't run."""
    named = dict(zip(_positional_names(positionals), positionals))
    clashes = sorted(set(named) & set(keywords))
    if clashes:
        raise TypeError(f"UnslothTrainer got multiple values for {', '.join(clashes)}")
    named.update(keywords)
    unknown = sorted(set(named) - OWN_KEYWORDS - set(REFUSED_KEYWORDS) - KNOWN_KEYWORDS)
    if unknown:
        raise TypeError(f"UnslothTrainer got unexpected keyword argument(s): {', '.join(unknown)}")
    _refuse(named)
    if named.get("train_dataset") is None:
        raise ValueError("UnslothTrainer needs a train_dataset")
    tokenizer = named.get("tokenizer")
    tokenizer = tokenizer if tokenizer is not None else named.get("processing_class")
    # A processor (text and images) holds the text tokenizer at `.tokenizer`; the MLX trainer needs that one.
    tokenizer = getattr(tokenizer, "tokenizer", None) or tokenizer
    if tokenizer is None:
        raise TypeError("UnslothTrainer needs a tokenizer: pass processing_class= (TRL's name) or tokenizer=")
    return TrainerCall(
        tokenizer=tokenizer,
        args=named.get("args"),
        train_dataset=named["train_dataset"],
        eval_dataset=named.get("eval_dataset"),
        data_collator=named.get("data_collator"),
        formatting_func=named.get("formatting_func"),
        callbacks=named.get("callbacks"),
        config_keywords={
            name: value for name, value in named.items() if name not in OWN_KEYWORDS and name not in REFUSED_KEYWORDS
        },
    )
