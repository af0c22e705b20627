# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""transformers' `Trainer` and `Seq2SeqTrainer` given an MLX model build the MLX trainer, as TRL's trainers do.

The classes stay transformers' own: a torch model (a reward model, a codec) still gets transformers' trainer. Only
`__new__` is patched, on the real classes or, without torch, on transformers' placeholders, so a notebook's
`Trainer(model=model, args=TrainingArguments(...), ...)` trains on MLX either way. A subclass (one overriding
`compute_loss`, say) given an MLX model is refused by name, since its overrides would not run.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Tuple

from ..models.methods import TOKENIZER_ATTRIBUTE
from ..training.collated import own_collator

if TYPE_CHECKING:
    from ..training.trainer import UnslothTrainer

ROUTED_MARK = "__unsloth_mlx_routed__"
# transformers' `Trainer.__init__` order after `model`; `Seq2SeqTrainer` takes no `optimizer_cls_and_kwargs` there.
TRAINER_ORDER = (
    "args",
    "data_collator",
    "train_dataset",
    "eval_dataset",
    "processing_class",
    "model_init",
    "compute_loss_func",
    "compute_metrics",
    "callbacks",
    "optimizers",
    "optimizer_cls_and_kwargs",
    "preprocess_logits_for_metrics",
)
ORDERS = {
    "Trainer": TRAINER_ORDER,
    "Seq2SeqTrainer": tuple(n for n in TRAINER_ORDER if n != "optimizer_cls_and_kwargs"),
}
# transformers' own default when `args` is left out.
DEFAULT_OUTPUT_DIR = "trainer_output"


def is_mlx_model(value: Any) -> bool:
    import mlx.nn as nn

    return isinstance(value, nn.Module)


def is_sequence_classifier(value: Any) -> bool:
    from ..embeddings.classifier import SequenceClassifier

    return isinstance(value, SequenceClassifier)


def _default_arguments() -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=DEFAULT_OUTPUT_DIR)


def mlx_trainer(kind: type, model: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> UnslothTrainer:
    """The MLX trainer for transformers' `kind(model, *args, **kwargs)`."""
    # Imported here: routing is installed while transformers loads, which the trainer's own import can set off.
    from ..speech.whisper import is_whisper
    from ..training.trainer import UnslothTrainer

    if kind.__name__ not in ORDERS or not kind.__module__.startswith("transformers."):
        raise NotImplementedError(
            f"{kind.__name__} (a subclass of transformers' Trainer) cannot train an MLX model: its overrides "
            "run torch; use transformers' Trainer itself, or SFTTrainer / UnslothTrainer, which train on MLX"
        )
    order = ORDERS[kind.__name__]
    if len(args) > len(order):
        raise TypeError(f"{kind.__name__} takes at most {len(order) + 1} positional arguments")
    named = dict(zip(order, args))
    clashes = sorted(set(named) & set(kwargs))
    if clashes:
        raise TypeError(f"{kind.__name__} got multiple values for {', '.join(clashes)}")
    named.update(kwargs)
    if is_sequence_classifier(model):
        from .classifier_trainer import ClassifierTrainer

        tokenizer = named.pop("tokenizer", None)
        if named.get("processing_class") is None:
            named["processing_class"] = tokenizer
        if named.get("args") is None:
            named["args"] = _default_arguments()
        return ClassifierTrainer(model, **named)  # type: ignore[return-value]
    # transformers 4's `tokenizer=`, which the published notebooks still pass.
    tokenizer = named.pop("tokenizer", None)
    if named.get("processing_class") is None:
        named["processing_class"] = tokenizer if tokenizer is not None else getattr(model, TOKENIZER_ATTRIBUTE, None)
    if named.get("args") is None:
        named["args"] = _default_arguments()
    if own_collator(named.get("data_collator")) and "dataset_kwargs" not in named:
        # transformers' Trainer hands the rows to the collator as they are; it never tokenizes them.
        named["dataset_kwargs"] = {"skip_prepare_dataset": True}
    # Whisper's evaluation hands compute_metrics the logits and labels as Seq2SeqTrainer does (speech.evaluation).
    metrics = named.pop("compute_metrics", None) if is_whisper(model) else None
    trainer = UnslothTrainer(model, **{name: value for name, value in named.items() if value is not None})
    trainer.compute_metrics = metrics  # type: ignore[attr-defined]
    return trainer


def _routing_new(kind: type) -> Any:
    original = kind.__dict__.get("__new__")

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        model = kwargs["model"] if "model" in kwargs else args[0] if args else None
        if is_mlx_model(model):
            rest = {name: value for name, value in kwargs.items() if name != "model"}
            return mlx_trainer(cls, model, args[1:] if "model" not in kwargs else args, rest)
        if original is not None:
            return original.__func__(cls, *args, **kwargs)
        return object.__new__(cls)

    setattr(__new__, ROUTED_MARK, True)
    return staticmethod(__new__)


def route_trainers(module: ModuleType) -> None:
    """Patch `module`'s `Trainer` / `Seq2SeqTrainer` (real or placeholder) so an MLX model gets the MLX trainer."""
    for name in ORDERS:
        kind = vars(module).get(name)
        current = kind.__dict__.get("__new__") if kind is not None else None
        if kind is None or getattr(getattr(current, "__func__", current), ROUTED_MARK, False):
            continue
        kind.__new__ = _routing_new(kind)
