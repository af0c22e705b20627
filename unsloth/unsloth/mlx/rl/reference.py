# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The reference policy of DPO and GRPO: a given model, the LoRA model with its adapters off, or the first weights.

`ref_model=None` with LoRA means the model with its adapters off, as TRL does for a PEFT model: for the reference
pass each mlx_lm LoRA layer is swapped for the base layer it wraps, so the pass costs what the base model's does.
An adapter that cannot be swapped so (another library's layer) has its `lora_b` zeroed instead, which gives its
base layer's output too. Without LoRA, the trained weights as they were when the trainer was built stand in, as
TRL's copy of the model does.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map, tree_map_with_path

ADAPTER_OUTPUT = "lora_b"
# Where mlx_lm's LoRA and DoRA layers keep the layer they wrap.
WRAPPED_LAYER_NAMES = ("linear", "embedding")

# (the dict or list holding an adapter, its key there, the adapter, the base layer it wraps)
AdapterSlot = Tuple[Any, Any, nn.Module, nn.Module]


def has_adapters(model: Any) -> bool:
    return any(path.endswith(ADAPTER_OUTPUT) for path, _ in tree_flatten(model.trainable_parameters()))


def _wrapped_layer(module: Any) -> Optional[nn.Module]:
    if not isinstance(module, nn.Module) or ADAPTER_OUTPUT not in module:
        return None
    return next((module[name] for name in WRAPPED_LAYER_NAMES if isinstance(module.get(name), nn.Module)), None)


def adapter_slots(model: Any) -> Optional[List[AdapterSlot]]:
    """Every adapter layer of `model` with the base layer it wraps, or None if some `lora_b` is not in one."""
    slots: List[AdapterSlot] = []
    for _, parent in model.named_modules():
        for key, child in parent.items():
            places = list(enumerate(child)) if isinstance(child, list) else [(key, child)]
            holder = child if isinstance(child, list) else parent
            for place, value in places:
                base = _wrapped_layer(value)
                if base is not None:
                    slots.append((holder, place, value, base))
    adapters = sum(1 for path, _ in tree_flatten(model.parameters()) if path.endswith(ADAPTER_OUTPUT))
    return slots if len(slots) == adapters else None


@contextmanager
def base_layers(slots: List[AdapterSlot]) -> Iterator[None]:
    """Within: each adapter layer replaced by the base layer it wraps."""
    for holder, place, _, base in slots:
        holder[place] = base
    try:
        yield
    finally:
        for holder, place, adapter, _ in slots:
            holder[place] = adapter


def _adapters_off(parameters: Any) -> Any:
    return tree_map_with_path(
        lambda path, array: mx.zeros_like(array) if path.endswith(ADAPTER_OUTPUT) else array, parameters
    )


class ReferencePolicy:
    """Runs a function on the reference policy and gives back its gradient-free result."""

    def __init__(self, model: Any, ref_model: Optional[Any] = None) -> None:
        self.model = model
        self.ref_model = ref_model
        self.adapters = ref_model is None and has_adapters(model)
        # Found once: walking a large model's modules every step would cost milliseconds a step.
        self.slots = adapter_slots(model) if self.adapters else None
        self.first_weights = None
        if ref_model is None and not self.adapters:
            # A copy, so the optimizer's in-place updates never reach the reference weights.
            self.first_weights = tree_map(lambda array: mx.array(array), model.trainable_parameters())
            mx.eval(self.first_weights)

    def run(self, function: Callable[[Any], Any]) -> Any:
        """The result, evaluated."""
        result = self.values(function)
        mx.eval(result)
        return result

    def values(self, function: Callable[[Any], Any]) -> Any:
        """The result, left lazy, so a caller may fold it into its own graph (a compiled step's, say)."""
        if self.ref_model is not None:
            return mx.stop_gradient(function(self.ref_model))
        if self.slots is not None:
            with base_layers(self.slots):
                return mx.stop_gradient(function(self.model))
        current = self.model.trainable_parameters()
        swapped = _adapters_off(current) if self.adapters else self.first_weights
        self.model.update(swapped)
        try:
            return mx.stop_gradient(function(self.model))
        finally:
            self.model.update(current)
