# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""A vision model that also answers a text model's call, so text-only rows (no images) train and score on it.

mlx-vlm's models want `pixel_values` and return an output object; the text trainer calls `model(tokens)` and reads
logits. A model given `accept_text_calls` runs such a call through its language model; any call with images, a
mask or other inputs is mlx-vlm's own, unchanged.
"""

from __future__ import annotations

from typing import Any, Dict

# The subclass made for each mlx-vlm class, so every model of a family shares one.
_TEXT_CALLING: Dict[type, type] = {}


def _text_calling_class(base: type) -> type:
    def __call__(self: Any, input_ids: Any, pixel_values: Any = None, mask: Any = None, cache: Any = None, **kw: Any):
        if pixel_values is None and mask is None and not kw:
            output = self.language_model(input_ids, cache=cache)
            return getattr(output, "logits", output)
        return base.__call__(self, input_ids, pixel_values, mask=mask, cache=cache, **kw)

    # The module stays mlx-vlm's: the family is read from it (backend.model_family).
    return type(base.__name__, (base,), {"__call__": __call__, "__module__": base.__module__})


def accept_text_calls(model: Any) -> Any:
    """`model`, whose `model(tokens)` / `model(tokens, cache=...)` now returns its language model's logits."""
    base = type(model)
    if base in _TEXT_CALLING.values():
        return model
    model.__class__ = _TEXT_CALLING.setdefault(base, _text_calling_class(base))
    return model
