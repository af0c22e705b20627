# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""torch's manners on a loaded MLX model: `parameters()` and `named_parameters()` that iterate, `.dtype`, `.to()`.

`parameters()` still returns MLX's tree, a dict, so MLX's own code (`tree_flatten`, `mx.eval`, `update`) reads it
as before; iterating it, or calling `next()` on it, yields torch-style views of the arrays instead of its keys. The
views and the model answer `.device` with the CPU, where torch tensors live beside an MLX model here (moves to "cuda"
leave them there), so `torch.rand(..., device=p.device)` works; `.dtype` is torch's dtype once torch is imported.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterator, Optional, Tuple

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ..models.methods import register_model_habit

TORCH_STYLE_MARK = "_unsloth_torch_style_base"


class Device:
    """torch's device for the CPU, for a program that has not imported torch."""

    type, index = "cpu", None

    def __str__(self) -> str:
        return self.type

    def __repr__(self) -> str:
        return f"device(type='{self.type}')"

    def __eq__(self, other: Any) -> bool:
        return str(other) == self.type

    def __hash__(self) -> int:
        return hash(self.type)


def host_device() -> Any:
    torch = sys.modules.get("torch")
    return torch.device("cpu") if torch is not None else Device()


def torch_dtype(dtype: Any) -> Any:
    """torch's dtype of the same name once torch is imported (mx.bfloat16 -> torch.bfloat16), else MLX's own."""
    torch = sys.modules.get("torch")
    name = str(dtype).rsplit(".", 1)[-1]
    return getattr(torch, name, dtype) if torch is not None else dtype


def mlx_dtype(value: Any) -> Optional[Any]:
    """The MLX dtype a `.to(...)` argument names (torch's, MLX's), or None when it names a device."""
    if isinstance(value, mx.Dtype):
        return value
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return getattr(mx, str(value).rsplit(".", 1)[-1])
    return None


class Parameter:
    """One MLX array as torch's `parameters()` yields it: `.device`, `.dtype`, `.shape`, `numel()`, `requires_grad`
    (which, set, freezes or unfreezes that weight in the model, as it would in torch)."""

    __slots__ = ("data", "name", "_model", "_requires_grad")

    def __init__(self, data: mx.array, requires_grad: bool, name: str = "", model: Any = None) -> None:
        self.data, self.name, self._model, self._requires_grad = data, name, model, requires_grad

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        path, _, key = self.name.rpartition(".")
        owner = dict(self._model.named_modules()).get(path) if self._model is not None else None
        if owner is None or key not in owner:
            raise NotImplementedError(f"requires_grad cannot be set on {self.name!r}: no module holds it by that name")
        (owner.unfreeze if value else owner.freeze)(keys=[key], recurse=False)
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Parameter":
        self.requires_grad = requires_grad
        return self

    @property
    def device(self) -> Any:
        return host_device()

    @property
    def dtype(self) -> Any:
        return torch_dtype(self.data.dtype)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def size(self, dim: Optional[int] = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return int(self.data.size)

    def element_size(self) -> int:
        return int(self.data.itemsize)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.data, dtype=dtype)

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, dtype={self.dtype}, requires_grad={self.requires_grad})"


class ParameterTree(dict):
    """MLX's parameter tree, which iterates (and answers `next()`) as torch's `parameters()` generator does."""

    def __init__(self, tree: Dict[str, Any], model: Any) -> None:
        super().__init__(tree)
        self._model = model
        self._cursor: Optional[Iterator[Parameter]] = None

    def named(self) -> Iterator[Tuple[str, Parameter]]:
        trainable = {name for name, _ in tree_flatten(self._model.trainable_parameters())}
        for name, array in tree_flatten(dict(self)):
            yield name, Parameter(array, name in trainable, name, self._model)

    def __iter__(self) -> Iterator[Parameter]:  # type: ignore[override]
        return (parameter for _, parameter in self.named())

    def __next__(self) -> Parameter:
        if self._cursor is None:
            self._cursor = iter(self)
        return next(self._cursor)


class TorchStyle:
    """Mixed in before an MLX model's own class."""

    def parameters(self) -> ParameterTree:
        return ParameterTree(super().parameters(), self)  # type: ignore[misc]

    def update(self, parameters: dict, strict: bool = True) -> Any:
        """MLX's `update`, which walks a tree by its keys: the tree `parameters()` gave is read as a plain dict."""
        plain = dict(parameters) if isinstance(parameters, ParameterTree) else parameters
        return super().update(plain, strict)  # type: ignore[misc]

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator:
        lead = f"{prefix}." if prefix else ""
        return ((lead + name, parameter) for name, parameter in self.parameters().named())

    @property
    def dtype(self) -> Any:
        """The first floating-point weight's dtype, as Hugging Face's `model.dtype` reads it (unless one was set)."""
        if "_unsloth_dtype" in vars(self):
            return vars(self)["_unsloth_dtype"]
        for _, array in tree_flatten(super().parameters()):  # type: ignore[misc]
            if mx.issubdtype(array.dtype, mx.floating):
                return torch_dtype(array.dtype)
        return torch_dtype(mx.float32)

    @dtype.setter
    def dtype(self, value: Any) -> None:
        vars(self)["_unsloth_dtype"] = value

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """A move to any device leaves the model where it is (MLX shares one memory); a dtype casts its floating
        weights, as torch's `Module.to(dtype)` does."""
        wanted = [dtype for dtype in map(mlx_dtype, [*args, *kwargs.values()]) if dtype is not None]
        if wanted:
            self.set_dtype(wanted[-1])  # type: ignore[attr-defined]
        return self

    def cpu(self) -> Any:
        return self

    def cuda(self, *args: Any, **kwargs: Any) -> Any:
        return self


_TORCH_STYLE: Dict[type, type] = {}


def teach_torch_habits(model: Any) -> None:
    """Give `model` torch's manners, by a subclass of its own class named and placed as it is."""
    base = type(model)
    if TORCH_STYLE_MARK in base.__dict__:
        return
    if base not in _TORCH_STYLE:
        namespace = {TORCH_STYLE_MARK: base, "__module__": base.__module__, "__qualname__": base.__qualname__}
        _TORCH_STYLE[base] = type(base.__name__, (TorchStyle, base), namespace)
    model.__class__ = _TORCH_STYLE[base]


register_model_habit(teach_torch_habits)
