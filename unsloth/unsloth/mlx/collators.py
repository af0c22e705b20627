# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Which data collators a notebook may hand the MLX trainer: those that only pad, which the trainer does itself."""

from __future__ import annotations

from typing import Any

PADDING_COLLATORS = frozenset(
    {"DataCollatorForSeq2Seq", "DataCollatorWithPadding", "DefaultDataCollator", "DataCollatorForLanguageModeling"}
)
_COLLATOR_PACKAGES = frozenset({"transformers", "trl"})


def describe(collator: Any) -> str:
    """The collator's class, or the function itself when a plain function is passed as the collator."""
    named = collator if callable(collator) and hasattr(collator, "__qualname__") else type(collator)
    return f"{named.__module__}.{named.__qualname__}"


def only_pads(collator: Any) -> bool:
    """True for the library's own padding collators; a subclass or a masking/flattening variant may do more."""
    kind = type(collator)
    if kind.__name__ not in PADDING_COLLATORS or kind.__module__.split(".")[0] not in _COLLATOR_PACKAGES:
        return False
    # transformers' language-modeling collator masks tokens unless mlm=False; TRL's may drop padding altogether.
    return not getattr(collator, "mlm", False) and not getattr(collator, "padding_free", False)


def check_collator(collator: Any) -> None:
    if collator is not None and not only_pads(collator):
        raise NotImplementedError(
            f"UnslothTrainer on MLX cannot use data_collator={describe(collator)}: the trainer pads batches "
            "itself and accepts only the padding collators (DataCollatorForSeq2Seq, DataCollatorWithPadding, "
            "DefaultDataCollator, and DataCollatorForLanguageModeling with mlm=False); "
            "for response-only loss call train_on_responses_only(trainer) instead"
        )
