# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The one module that calls mlx-embeddings: a Hub folder's backbone as its MLX model, and its token states.

mlx-embeddings knows the families (`mlx_embeddings.models.<model_type>`); BACKBONES keeps only what it does not say:
where each family's blocks sit (for LoRA) and how to ask it for the token states before its own pooling.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

PIN = "mlx-embeddings==0.1.0"
TokenStates = Callable[[Any, Any, Any], Any]


def _bert_states(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    return model(input_ids, attention_mask=attention_mask).last_hidden_state


def _modernbert_states(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    return model.model(input_ids, attention_mask=attention_mask, return_dict=True)["last_hidden_state"]


def _causal_padding_mask(attention_mask: Any, dtype: Any) -> Any:
    """Causal and padding masks as one additive mask with a finite floor, so a left-padded row's pad positions
    (which see no real token) stay finite instead of turning every later row to NaN, as -inf does."""
    import mlx.core as mx

    length = attention_mask.shape[1]
    causal = mx.tril(mx.ones((length, length), dtype=mx.bool_))[None, None]
    allowed = causal & attention_mask.astype(mx.bool_)[:, None, None, :]
    return mx.where(allowed, mx.array(0.0, dtype), mx.array(mx.finfo(dtype).min, dtype))


def _decoder_states(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    dtype = model.model.embed_tokens.weight.dtype
    return model.model(input_ids, attention_mask=_causal_padding_mask(attention_mask, dtype))


def _gemma3_states(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """EmbeddingGemma as transformers runs it with `use_bidirectional_attention`: a full layer sees the whole row, a
    sliding layer the positions within half its window on each side (mlx-embeddings gives every layer the row)."""
    import mlx.core as mx

    inner = model.model
    states = inner.embed_tokens(input_ids)
    states = states * mx.array(inner.config.hidden_size**0.5, states.dtype)
    floor = mx.array(mx.finfo(states.dtype).min, states.dtype)
    keep = attention_mask.astype(mx.bool_)[:, None, None, :]
    positions = mx.arange(input_ids.shape[1])
    # transformers splits a bidirectional layer's window between both sides: |i - j| <= sliding_window // 2.
    near = mx.abs(positions[:, None] - positions[None, :]) <= inner.config.sliding_window // 2
    whole = mx.where(keep, mx.array(0.0, states.dtype), floor)
    window = mx.where(keep & near[None, None], mx.array(0.0, states.dtype), floor)
    for layer in inner.layers:
        states = layer(states, window if layer.self_attn.is_sliding else whole, None)
    return inner.norm(states)


@dataclass(frozen=True)
class Backbone:
    blocks: str  # the attribute path of the transformer blocks, which LoRA walks
    prefix: str  # what mlx-embeddings puts before the bare Hub model's weight names
    token_states: TokenStates
    # Children of mlx-embeddings' model that the ST folder keeps elsewhere (EmbeddingGemma's Dense layers).
    dropped: Tuple[str, ...] = ()


BACKBONES: Dict[str, Backbone] = {
    "bert": Backbone("encoder.layer", "", _bert_states),
    "xlm-roberta": Backbone("encoder.layer", "", _bert_states),
    "modernbert": Backbone("model.layers", "model.", _modernbert_states),
    "qwen3": Backbone("model.layers", "model.", _decoder_states),
    "gemma3_text": Backbone("model.layers", "model.", _gemma3_states, dropped=("dense",)),
}


def backbone_for(model_type: str) -> Backbone:
    if model_type not in BACKBONES:
        raise NotImplementedError(
            f"embedding models of type {model_type!r} are not supported on MLX yet "
            f"(supported: {', '.join(sorted(BACKBONES))})"
        )
    return BACKBONES[model_type]


def _family_module(model_type: str) -> Any:
    try:
        # The Hub writes `xlm-roberta`; mlx-embeddings' module is `xlm_roberta`.
        return importlib.import_module(f"mlx_embeddings.models.{model_type.replace('-', '_')}")
    except ImportError as error:
        raise ImportError(
            f"embedding models on MLX need mlx-embeddings ({PIN}; install it with `pip install --no-deps {PIN}`): "
            f"{error}"
        ) from error


def _weight_files(folder: Path) -> List[Path]:
    files = sorted(path for path in folder.glob("*.safetensors") if not path.name.startswith("adapter_"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights for its backbone")
    return files


def load_backbone(folder: Path, config: Dict[str, Any], dtype: Optional[Any] = None) -> Any:
    """mlx-embeddings' model for `config` with the folder's weights (all of them: a missing one is an error)."""
    import mlx.core as mx

    family = backbone_for(config["model_type"])
    module = _family_module(config["model_type"])
    model = module.Model(module.ModelArgs.from_dict(config))
    for name in family.dropped:
        delattr(model, name)
    weights: Dict[str, Any] = {}
    for path in _weight_files(folder):
        weights.update(mx.load(str(path)))
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    if dtype is not None:
        weights = {name: value.astype(dtype) for name, value in weights.items()}
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    return model


def read_config(folder: Path) -> Dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def hub_names(model_type: str, weights: Dict[str, Any]) -> Dict[str, Any]:
    """The backbone's weights under the bare Hub model's names, as sentence-transformers saves them."""
    prefix = backbone_for(model_type).prefix
    return {
        name[len(prefix) :] if prefix and name.startswith(prefix) else name: value for name, value in weights.items()
    }
