# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Gradient checkpointing: each transformer block recomputes its activations in the backward pass.

CUDA Unsloth's `use_gradient_checkpointing="unsloth"` offloads activations to CPU RAM; a Mac's memory is unified,
so there is no host to offload to and recomputation is how the same memory is saved. Each block's class is swapped
for a subclass whose call runs under `mx.checkpoint`, so only the blocks' inputs stay alive between the passes.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn

#: The attribute on a model that asks for checkpointing (set by `use_gradient_checkpointing=True` / "unsloth").
MODEL_ATTRIBUTE = "unsloth_gradient_checkpointing"

# The names mlx-lm and mlx-vlm give a model's stack of repeated blocks.
_BLOCK_LISTS = ("layers", "blocks")
_CHECKPOINTED: Dict[type, type] = {}


class _KeyedDropout(nn.Module):
    """`nn.Dropout` drawing its mask from a given key instead of the global random state."""

    def __init__(self, keep: float, key: mx.array) -> None:
        super().__init__()
        self._keep, self._key = keep, key

    def __call__(self, x: mx.array) -> mx.array:
        return x * mx.random.bernoulli(self._keep, x.shape, key=self._key) * (1 / self._keep)


def _active_dropouts(block: nn.Module) -> List[Tuple[nn.Module, str, nn.Dropout]]:
    """Each dropout layer inside `block` that would zero something now, with its parent and name."""
    found = []
    for _, parent in block.named_modules():
        for name, child in parent.items():
            if isinstance(child, nn.Dropout) and child.training and child._p_1 < 1:
                found.append((parent, name, child))
    return found


@contextmanager
def _keyed(dropouts: List[Tuple[nn.Module, str, nn.Dropout]], key: Optional[mx.array]) -> Iterator[None]:
    if key is None:
        yield
        return
    for (parent, name, layer), layer_key in zip(dropouts, mx.random.split(key, max(len(dropouts), 1))):
        parent[name] = _KeyedDropout(layer._p_1, layer_key)
    try:
        yield
    finally:
        for parent, name, layer in dropouts:
            parent[name] = layer


def _checkpointed_class(base: type) -> type:
    """A subclass of `base` whose call is recomputed in the backward pass; one per base class."""
    if base in _CHECKPOINTED:
        return _CHECKPOINTED[base]
    plain_call = base.__call__

    def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        dropouts = _active_dropouts(self)
        # Dropout draws from a key fixed here, so the backward pass's recomputation draws the same masks.
        key = mx.random.randint(0, 2**31 - 1, (2,)).astype(mx.uint32) if dropouts else None

        def recomputable(params: Any, *inner_args: Any, **inner_kwargs: Any) -> Any:
            self.update(params)
            with _keyed(dropouts, key):
                return plain_call(self, *inner_args, **inner_kwargs)

        return mx.checkpoint(recomputable)(self.trainable_parameters(), *args, **kwargs)

    subclass = type(base.__name__, (base,), {"__call__": __call__, "_unsloth_checkpointed_base": base})
    subclass.__qualname__ = base.__qualname__
    subclass.__module__ = base.__module__
    _CHECKPOINTED[base] = subclass
    return subclass


def transformer_blocks(model: Any) -> List[nn.Module]:
    """Every repeated block of the model (a text model's decoder layers, a VLM's language and vision layers)."""
    blocks: List[nn.Module] = []
    inside: set = set()
    for _, module in model.named_modules():
        if id(module) in inside:
            continue
        for name in _BLOCK_LISTS:
            children = module.get(name) if isinstance(module, dict) else None
            if isinstance(children, list) and children and all(isinstance(c, nn.Module) for c in children):
                for child in children:
                    if id(child) not in inside:
                        blocks.append(child)
                        inside.update(id(sub) for _, sub in child.named_modules())
    return blocks


def is_checkpointed(block: Any) -> bool:
    return "_unsloth_checkpointed_base" in type(block).__dict__


def enable_gradient_checkpointing(model: Any) -> int:
    """Checkpoint each block of `model` (again on a checkpointed model changes nothing); returns how many blocks."""
    blocks = transformer_blocks(model)
    if not blocks:
        raise ValueError(
            f"gradient checkpointing: {type(model).__name__} has no list of transformer blocks "
            f"(looked for {', '.join(_BLOCK_LISTS)}) to recompute"
        )
    for block in blocks:
        if not is_checkpointed(block):
            block.__class__ = _checkpointed_class(type(block))
    return len(blocks)


def disable_gradient_checkpointing(model: Any) -> None:
    """Give every block its plain call back."""
    for block in transformer_blocks(model):
        if is_checkpointed(block):
            block.__class__ = type(block).__dict__["_unsloth_checkpointed_base"]


def wants_gradient_checkpointing(model: Any, requested: Any = False) -> bool:
    """On when the trainer's arguments or the model (`use_gradient_checkpointing`) ask for it."""
    return checkpointing_requested(requested) or checkpointing_requested(getattr(model, MODEL_ATTRIBUTE, False))


def checkpointing_requested(value: Any) -> bool:
    """CUDA Unsloth's values: True and "unsloth" recompute; False and None keep every activation."""
    if value in (None, False):
        return False
    if value is True or value == "unsloth":
        return True
    raise ValueError(f"gradient checkpointing must be True, False or 'unsloth', got {value!r}")


@contextmanager
def gradient_checkpointing(model: Any, enabled: bool) -> Iterator[None]:
    """Checkpoint the model's blocks for the span of a `with`, then leave them as they were."""
    already = [is_checkpointed(block) for block in transformer_blocks(model)] if enabled else []
    if enabled:
        enable_gradient_checkpointing(model)
    try:
        yield
    finally:
        if enabled and not any(already):
            disable_gradient_checkpointing(model)


def request_gradient_checkpointing(model: Any, keywords: Dict[str, Any]) -> Any:
    """Record `use_gradient_checkpointing` from a loader's keywords on the model (the trainer applies it)."""
    if "use_gradient_checkpointing" in keywords:
        setattr(model, MODEL_ATTRIBUTE, checkpointing_requested(keywords["use_gradient_checkpointing"]))
    return model
