# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The reference policy of DPO and GRPO: a given model, the LoRA model with its adapters off, or the first weights.

`ref_model=None` with LoRA means the model with its adapters off, as TRL does for a PEFT model: every `lora_b` is
zero for the reference pass, so each LoRA layer gives exactly its base layer's output. Without LoRA, the trained
weights as they were when the trainer was built stand in, as TRL's copy of the model does.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map, tree_map_with_path

ADAPTER_OUTPUT = "lora_b"


def has_adapters(model: Any) -> bool:
    return any(path.endswith(ADAPTER_OUTPUT) for path, _ in tree_flatten(model.trainable_parameters()))


def _adapters_off(parameters: Any) -> Any:
    return tree_map_with_path(
        lambda path, array: mx.zeros_like(array) if path.endswith(ADAPTER_OUTPUT) else array, parameters
    )


class ReferencePolicy:
    """Runs a function on the reference policy and gives back its (gradient-free, evaluated) result."""

    def __init__(self, model: Any, ref_model: Optional[Any] = None) -> None:
        self.model = model
        self.ref_model = ref_model
        self.adapters = ref_model is None and has_adapters(model)
        self.first_weights = None
        if ref_model is None and not self.adapters:
            # A copy, so the optimizer's in-place updates never reach the reference weights.
            self.first_weights = tree_map(lambda array: mx.array(array), model.trainable_parameters())
            mx.eval(self.first_weights)

    def run(self, function: Callable[[Any], Any]) -> Any:
        if self.ref_model is not None:
            result = mx.stop_gradient(function(self.ref_model))
            mx.eval(result)
            return result
        current = self.model.trainable_parameters()
        swapped = _adapters_off(current) if self.adapters else self.first_weights
        self.model.update(swapped)
        try:
            result = mx.stop_gradient(function(self.model))
            mx.eval(result)
        finally:
            self.model.update(current)
        return result
