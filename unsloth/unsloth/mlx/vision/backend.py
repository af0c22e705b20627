# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Every call this package makes into `mlx-vlm`, in one place, because its API moves between minor releases.

Written against mlx-vlm 0.7.10 (the pin in `unsloth[mlx-vision]`): loading a model folder with its processor, the
causal forward pass the trainer differentiates, and token-by-token generation. Nothing else imports `mlx_vlm`.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import mlx.core as mx

TESTED_VERSION = "0.7.10"
INSTALL_HINT = 'pip install "unsloth[mlx-vision]" (mlx-vlm==0.7.10 and Pillow)'
# Families whose forward pass this module knows; others load but are refused before training.
FAMILIES = ("qwen2_5_vl", "gemma3")


def require_mlx_vlm() -> None:
    """ImportError naming the install command when mlx-vlm (or Pillow, which its processors need) is missing."""
    missing = []
    for module in ("mlx_vlm", "PIL"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(f"vision models on MLX need {' and '.join(missing)}: {INSTALL_HINT}")


def installed_version() -> Optional[str]:
    try:
        return importlib.metadata.version("mlx-vlm")
    except importlib.metadata.PackageNotFoundError:
        return None


def load_model_and_processor(folder: Path) -> Tuple[Any, Any]:
    """The mlx-vlm model and its processor from a local model folder."""
    require_mlx_vlm()
    from mlx_vlm.utils import load

    model, processor = load(str(folder))
    # mlx-vlm 0.7.10's Gemma 3 processor leaves the chat template on its tokenizer only.
    if getattr(processor, "chat_template", None) is None:
        processor.chat_template = getattr(getattr(processor, "tokenizer", None), "chat_template", None)
    return model, processor


def model_family(model: Any) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", "") or type(model).__module__.split(".")[-2])


def check_family(model: Any) -> str:
    family = model_family(model)
    if family not in FAMILIES:
        raise NotImplementedError(
            f"vision fine-tuning on MLX supports {', '.join(FAMILIES)}; this model is {family!r} "
            f"(mlx-vlm {installed_version() or 'absent'} can load it, but its training forward pass is not wired here)"
        )
    return family


def vision_tower(model: Any) -> Any:
    return model.vision_tower


def language_model(model: Any) -> Any:
    return model.language_model


def causal_logits(model: Any, input_ids: mx.array, pixel_values: Optional[mx.array], extras: Dict[str, Any]) -> Any:
    """Logits of every position, each seeing only earlier tokens (and the images), for a right-padded batch."""
    if pixel_values is None:
        output = model.language_model(input_ids)
        return getattr(output, "logits", output)
    if model_family(model) == "gemma3":
        # Gemma 3's own call masks image and padding with a non-causal mask; training needs the causal one.
        features = model.get_input_embeddings(input_ids, pixel_values, mx.ones(input_ids.shape, dtype=mx.int32))
        output = model.language_model(input_ids, inputs_embeds=features.inputs_embeds, mask=None)
    else:
        output = model(input_ids, pixel_values, mask=None, **extras)
    return getattr(output, "logits", output)


def generate_tokens(
    model: Any,
    input_ids: mx.array,
    pixel_values: Optional[mx.array],
    mask: Optional[mx.array],
    extras: Dict[str, Any],
    max_new_tokens: int,
    sampling: Dict[str, Any],
) -> Iterator[int]:
    """New token ids one by one (the caller stops at EOS), with a key-value cache."""
    if model_family(model) == "gemma3":
        yield from _causal_prefill_tokens(model, input_ids, pixel_values, max_new_tokens, sampling)
        return
    from mlx_vlm.generate.ar import generate_step

    steps = generate_step(input_ids, model, pixel_values, mask, max_tokens=max_new_tokens, **sampling, **extras)
    for token, _ in steps:
        yield int(token.item() if hasattr(token, "item") else token)


def _causal_prefill_tokens(
    model: Any, input_ids: mx.array, pixel_values: Optional[mx.array], max_new_tokens: int, sampling: Dict[str, Any]
) -> Iterator[int]:
    """Decoding whose prompt pass is causal, as in training (mlx-vlm's Gemma 3 prompt pass attends both ways)."""
    from mlx_lm.sample_utils import make_sampler

    unsupported = sorted(set(sampling) - {"temperature", "top_p", "min_p", "top_k"})
    if unsupported:
        raise NotImplementedError(
            f"generate for {model_family(model)} on MLX does not support {', '.join(unsupported)}"
        )
    sampler = make_sampler(
        temp=float(sampling.get("temperature") or 0.0),
        top_p=float(sampling.get("top_p") or 0.0),
        min_p=float(sampling.get("min_p") or 0.0),
        top_k=int(sampling.get("top_k") or 0),
    )
    language = model.language_model
    cache = language.make_cache()
    embeds = None
    if pixel_values is not None:
        embeds = model.get_input_embeddings(input_ids, pixel_values, mx.ones(input_ids.shape, dtype=mx.int32))
        embeds = embeds.inputs_embeds
    logits = language(input_ids, inputs_embeds=embeds, mask=None, cache=cache).logits[:, -1, :]
    for _ in range(max_new_tokens):
        token = sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        value = int(token.item())
        yield value
        logits = language(mx.array([[value]]), cache=cache).logits[:, -1, :]


def process_conversation(processor: Any, text: str, images: List[Any]) -> Dict[str, Any]:
    """One rendered conversation through the processor: 1-D `input_ids`, and numpy image features."""
    import numpy as np

    if not images:
        ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": list(ids)}
    # Gemma 3's processor reads a list of images per text; Qwen's a flat list across texts.
    given = [images] if _nested_images(processor) else images
    output = processor(images=given, text=[text], add_special_tokens=False)
    result = {name: np.asarray(value) for name, value in output.items()}
    result["input_ids"] = result["input_ids"][0].tolist()
    result.pop("attention_mask", None)
    result.pop("token_type_ids", None)
    return result


def _nested_images(processor: Any) -> bool:
    return type(processor).__name__.startswith("Gemma3")


def image_token_id(processor: Any, model: Any = None) -> int:
    """The id of the placeholder each image's features replace."""
    for owner in (processor, getattr(processor, "tokenizer", None), getattr(model, "config", None)):
        for name in ("image_token_id", "image_token_index"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    raise ValueError(f"cannot tell the image token of {type(processor).__name__}")
