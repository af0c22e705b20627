# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`SequenceClassifier`: ModernBERT with transformers' ModernBertForSequenceClassification head, on MLX.

The backbone is mlx-embeddings' (`backbone.py`); the head is computed as transformers computes it: the
`classifier_pooling` ("cls" or "mean"), dense + activation + LayerNorm, dropout (off in eval), then the classifier.
The loss is the one transformers picks from `num_labels`, `problem_type` and the labels' dtype.
A head the folder lacks is initialised as transformers' `_init_weights` does (truncated normal, same stds).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from .backbone import Backbone, _family_module, _weight_files, backbone_for

# Families whose transformers classifier this module computes, by model_type: the class transformers builds.
CLASSIFIERS = {"modernbert": "ModernBertForSequenceClassification"}
HEAD_PARTS = ("head.", "classifier.")
# Weights of other heads (the MLM decoder) that transformers drops when it builds the classifier.
DROPPED_PARTS = ("decoder.",)
ACTIVATIONS = {
    "gelu": lambda x: nn.gelu(x),
    "gelu_python": lambda x: nn.gelu(x),
    "gelu_new": lambda x: nn.gelu_approx(x),
    "gelu_pytorch_tanh": lambda x: nn.gelu_approx(x),
    "relu": nn.relu,
    "silu": nn.silu,
    "swish": nn.silu,
}
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
CONFIG_DEFAULTS = {"classifier_pooling": "cls", "classifier_activation": "gelu", "classifier_bias": False}


def classifier_class(config: Dict[str, Any]) -> str:
    model_type = config.get("model_type")
    if model_type not in CLASSIFIERS:
        raise NotImplementedError(
            f"auto_model=AutoModelForSequenceClassification for a {model_type!r} checkpoint is not supported on MLX "
            f"(supported: {', '.join(sorted(CLASSIFIERS))})"
        )
    return CLASSIFIERS[model_type]


@dataclass
class SequenceClassifierOutput:
    """What transformers' classifier returns: `.logits`, `.loss` (None without labels), and item access."""

    logits: mx.array
    loss: Optional[mx.array] = None

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


def problem_type_for(config: Dict[str, Any], labels: mx.array) -> str:
    """transformers' choice: regression for one label, single-label for integer labels, else multi-label."""
    chosen = config.get("problem_type")
    if chosen is not None:
        if chosen not in PROBLEM_TYPES:
            raise ValueError(f"problem_type={chosen!r} is not one of {', '.join(PROBLEM_TYPES)}")
        return chosen
    if int(config["num_labels"]) == 1:
        return "regression"
    return "single_label_classification" if mx.issubdtype(labels.dtype, mx.integer) else "multi_label_classification"


def classification_loss(logits: mx.array, labels: mx.array, problem_type: str) -> mx.array:
    """MSE, cross-entropy or BCE-with-logits, each a mean, as transformers' classifier computes it."""
    if problem_type == "regression":
        if logits.shape[-1] == 1:
            return mx.mean((logits.reshape(-1) - labels.reshape(-1).astype(logits.dtype)) ** 2)
        return mx.mean((logits - labels.astype(logits.dtype)) ** 2)
    if problem_type == "single_label_classification":
        flat = logits.reshape(-1, logits.shape[-1]).astype(mx.float32)
        return mx.mean(nn.losses.cross_entropy(flat, labels.reshape(-1)))
    return mx.mean(nn.losses.binary_cross_entropy(logits, labels.astype(logits.dtype), with_logits=True))


class PredictionHead(nn.Module):
    """ModernBertPredictionHead: dense, activation, LayerNorm."""

    def __init__(self, config: Dict[str, Any]) -> None:
        super().__init__()
        hidden = int(config["hidden_size"])
        activation = config["classifier_activation"]
        if activation not in ACTIVATIONS:
            raise NotImplementedError(f"classifier_activation={activation!r} is not supported on MLX")
        self.dense = nn.Linear(hidden, hidden, bias=bool(config["classifier_bias"]))
        self.norm = nn.LayerNorm(hidden, eps=float(config.get("norm_eps", 1e-5)), bias=bool(config.get("norm_bias")))
        object.__setattr__(self, "activation", ACTIVATIONS[activation])

    def __call__(self, states: mx.array) -> mx.array:
        return self.norm(self.activation(self.dense(states)))


def _truncated_normal(shape: Tuple[int, ...], std: float, cutoff: float) -> mx.array:
    return mx.random.truncated_normal(-cutoff, cutoff, shape) * std


class SequenceClassifier(nn.Module):
    """What `FastModel.from_pretrained(..., auto_model=AutoModelForSequenceClassification)` returns on MLX."""

    def __init__(self, backbone: Any, family: Backbone, config: Dict[str, Any]) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = PredictionHead(config)
        self.drop = nn.Dropout(float(config.get("classifier_dropout") or 0.0))
        self.classifier = nn.Linear(int(config["hidden_size"]), int(config["num_labels"]))
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "hf_config", config)
        object.__setattr__(self, "config", _ConfigView(config))
        object.__setattr__(self, "name_or_path", "")
        object.__setattr__(self, "tokenizer", None)

    @property
    def layers(self) -> Any:
        """The backbone's blocks, where LoRA goes."""
        found: Any = self.backbone
        for part in self.family.blocks.split("."):
            found = getattr(found, part)
        return found

    def init_head(self) -> None:
        """transformers' init for a head the checkpoint lacks: truncated normal (cutoff 3 std), biases zero."""
        config = self.hf_config
        cutoff = float(config.get("initializer_cutoff_factor") or 3.0)
        out_std = float(config.get("initializer_range", 0.02)) / math.sqrt(2.0 * int(config["num_hidden_layers"]))
        self.head.dense.weight = _truncated_normal(self.head.dense.weight.shape, out_std, cutoff)
        final_std = int(config["hidden_size"]) ** -0.5
        self.classifier.weight = _truncated_normal(self.classifier.weight.shape, final_std, cutoff)
        self.classifier.bias = mx.zeros_like(self.classifier.bias)
        if "bias" in self.head.dense:
            self.head.dense.bias = mx.zeros_like(self.head.dense.bias)

    def logits(self, input_ids: mx.array, attention_mask: Optional[mx.array] = None) -> mx.array:
        if attention_mask is None:
            attention_mask = mx.ones(input_ids.shape, dtype=mx.int32)
        states = self.family.token_states(self.backbone, input_ids, attention_mask)
        if self.hf_config["classifier_pooling"] == "cls":
            pooled = states[:, 0]
        else:
            mask = attention_mask.astype(states.dtype)[..., None]
            pooled = (states * mask).sum(axis=1) / mask.sum(axis=1)
        return self.classifier(self.drop(self.head(pooled)))

    def __call__(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        labels: Any = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput:
        """transformers' call: `model(**tokenizer(texts, return_tensors=...))` with optional labels."""
        kwargs.pop("token_type_ids", None), kwargs.pop("return_dict", None)
        if kwargs:
            raise NotImplementedError(f"the MLX sequence classifier does not take {', '.join(sorted(kwargs))}")
        ids = as_mx(input_ids, mx.int32)
        mask = None if attention_mask is None else as_mx(attention_mask, mx.int32)
        logits = self.logits(ids, mask)
        if labels is None:
            return SequenceClassifierOutput(logits)
        targets = as_mx(labels)
        return SequenceClassifierOutput(
            logits, classification_loss(logits, targets, problem_type_for(self.hf_config, targets))
        )


class _ConfigView:
    """The config's keys as attributes (`model.config.id2label`), as transformers' config answers them."""

    def __init__(self, config: Dict[str, Any]) -> None:
        object.__setattr__(self, "_values", config)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._values[name] = value

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._values)


def as_mx(value: Any, dtype: Optional[Any] = None) -> mx.array:
    """A torch tensor, numpy array or list as an mx.array (the tokenizer may have been asked for any of them)."""
    if isinstance(value, mx.array):
        array = value
    elif hasattr(value, "detach"):
        array = mx.array(value.detach().cpu().numpy())
    else:
        array = mx.array(np.asarray(value))
    return array if dtype is None else array.astype(dtype)


def classifier_config(folder: Path, overrides: Dict[str, Any]) -> Dict[str, Any]:
    """The folder's config with the caller's label settings over it, as transformers' from_pretrained merges them."""
    config = {**CONFIG_DEFAULTS, **json.loads((folder / "config.json").read_text(encoding="utf-8"))}
    config.update({name: value for name, value in overrides.items() if value is not None})
    if config.get("id2label"):
        config["id2label"] = {int(key): value for key, value in config["id2label"].items()}
    if "num_labels" not in overrides and config.get("id2label"):
        config["num_labels"] = len(config["id2label"])
    config.setdefault("num_labels", 2)
    if not config.get("id2label") or len(config["id2label"]) != int(config["num_labels"]):
        config["id2label"] = {index: f"LABEL_{index}" for index in range(int(config["num_labels"]))}
    if not config.get("label2id") or len(config["label2id"]) != int(config["num_labels"]):
        config["label2id"] = {label: index for index, label in config["id2label"].items()}
    config["architectures"] = [classifier_class(config)]
    return config


def load_classifier(folder: Path, config: Dict[str, Any], dtype: Optional[Any] = None) -> SequenceClassifier:
    """The backbone, head and classifier from the folder's weights; a head the folder lacks gets transformers' init."""
    family = backbone_for(config["model_type"])
    module = _family_module(config["model_type"])
    # mlx-embeddings builds its own heads from `architectures`; the bare backbone is asked for here.
    backbone = module.Model(module.ModelArgs.from_dict({**config, "architectures": ["ModernBertModel"]}))
    weights: Dict[str, mx.array] = {}
    for path in _weight_files(folder):
        weights.update(mx.load(str(path)))
    head = {name: value for name, value in weights.items() if name.startswith(HEAD_PARTS)}
    rest = {name: value for name, value in weights.items() if not name.startswith(HEAD_PARTS + DROPPED_PARTS)}
    model = SequenceClassifier(backbone, family, config)
    model.init_head()
    backbone_weights = backbone.sanitize(rest) if hasattr(backbone, "sanitize") else rest
    backbone.load_weights(list(backbone_weights.items()), strict=True)
    if head:
        model.load_weights(list(head.items()), strict=False)
    if dtype is not None:
        model.set_dtype(dtype)
    object.__setattr__(model, "head_from_checkpoint", tuple(sorted({name.split(".")[0] for name in head})))
    model.eval()
    mx.eval(model.parameters())
    return model


def hub_weights(model: SequenceClassifier) -> Dict[str, mx.array]:
    """The classifier's weights under transformers' names (`model.*`, `head.*`, `classifier.*`), LoRA folded in."""
    from mlx_lm.tuner.lora import LoRALinear

    weights = dict(tree_flatten(model.parameters()))
    for path, module in model.named_modules():
        if isinstance(module, LoRALinear):
            fused = module.fuse()
            for name in ("linear.weight", "linear.bias", "lora_a", "lora_b"):
                weights.pop(f"{path}.{name}", None)
            weights[f"{path}.weight"] = fused.weight
            if "bias" in fused:
                weights[f"{path}.bias"] = fused.bias
    return {name.removeprefix("backbone."): value for name, value in weights.items()}
