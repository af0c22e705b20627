# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Saving Whisper and CSM as CUDA Unsloth does: `save_pretrained` writes PEFT's adapter for transformers' model, and
`save_pretrained_merged` (and the pushes) a transformers folder with LoRA folded in, under transformers' tensor names.

The names come from the loader's own mapping (transformers' -> mlx-audio's) run backwards on the source folder's
tensors: each name's target and axis order are read from a small probe, so no second table is kept here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MethodType
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

import mlx.core as mx

from ..models import hub
from ..models.keywords import normalised_name
from ..models.merged import MXFP4_MODEL_TYPES, check_merged_keywords, merged_weights, sixteen_bit
from .whisper import ATTENTIONS, MLX_NAMES, SOURCE_ATTRIBUTE

LORA_SETTINGS_ATTRIBUTE = "_unsloth_whisper_lora"
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
# mlx-audio's attention names -> transformers'.
HF_ATTENTIONS = {"attn": "self_attn", "cross_attn": "encoder_attn"}
HF_LINEARS = {mlx: hf for hf, mlx in MLX_NAMES.items()}
PEFT_PREFIX = "base_model.model.model."
SAVING_ATTRIBUTE = "_unsloth_speech_saving"
MERGED_METHODS = ("merged_16bit", "merged_32bit")
# Axis lengths that all differ, so a probe's shape after the mapping tells how its axes were permuted.
PROBE_SIZES = (2, 3, 5, 7)


def _adapted(model: Any) -> Iterator[Tuple[str, Any]]:
    """(transformers' module path, LoRA layer) for each wrapped linear."""
    for stack in ("encoder", "decoder"):
        for index, block in enumerate(getattr(model, stack).blocks):
            owners = [(f"{stack}.layers.{index}", block)]
            owners += [
                (f"{stack}.layers.{index}.{HF_ATTENTIONS[name]}", getattr(block, name))
                for name in ATTENTIONS
                if getattr(block, name, None) is not None
            ]
            for path, owner in owners:
                for mlx_name, hf_name in HF_LINEARS.items():
                    layer = getattr(owner, mlx_name, None)
                    if layer is not None and "lora_a" in layer:
                        yield f"{path}.{hf_name}", layer


def peft_tensors(model: Any) -> Dict[str, mx.array]:
    """PEFT's names and layouts for Whisper's adapted linears."""
    return lora_tensors(PEFT_PREFIX, _adapted(model))


def lora_tensors(prefix: str, adapted: Iterable[Tuple[str, Any]]) -> Dict[str, mx.array]:
    """lora_A (rank, in) and lora_B (out, rank), the transposes of mlx-lm's, under `prefix` + transformers' path."""
    tensors = {}
    for path, layer in adapted:
        tensors[f"{prefix}{path}.lora_A.weight"] = mx.contiguous(layer.lora_a.T)
        tensors[f"{prefix}{path}.lora_B.weight"] = mx.contiguous(layer.lora_b.T)
    return tensors


def write_peft_adapter(
    save_directory: str | Path,
    tensors: Dict[str, mx.array],
    settings: Optional[Dict[str, Any]],
    source: Any,
    kind: str,
    processor: Any = None,
) -> None:
    """PEFT's adapter files (`task_type=None`, as the speech notebooks set it) for a model LoRA was put on."""
    if settings is None:
        raise NotImplementedError(
            f"model.save_pretrained on a {kind} without LoRA: there is no adapter to save; call "
            "FastModel.get_peft_model(model, ...) first, or model.save_pretrained_merged(folder, processor) for the "
            "full weights"
        )
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / WEIGHTS_FILE), tensors, metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": source,
        "bias": "none",
        "inference_mode": True,
        **settings,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if processor is not None:
        processor.save_pretrained(str(folder))


def save_whisper_adapter(model: Any, save_directory: str | Path, processor: Any = None, **_: Any) -> None:
    """`model.save_pretrained(folder)` on a Whisper with LoRA: PEFT's adapter files (and the processor's, if given)."""
    settings = getattr(model, LORA_SETTINGS_ATTRIBUTE, None)
    tensors = peft_tensors(model) if settings is not None else {}
    source = getattr(model, SOURCE_ATTRIBUTE, None)
    write_peft_adapter(save_directory, tensors, settings, source, "Whisper", processor)


@dataclass(frozen=True)
class SpeechSaving:
    """What the merged save needs of a family: its name, the folder it loaded, and its loader's name mapping."""

    kind: str
    source: str
    # transformers' tensors -> mlx-audio's names and layouts; a tensor the MLX model does not hold maps to nothing.
    to_mlx: Callable[[Dict[str, mx.array]], Dict[str, mx.array]]


def attach_speech_saving(model: Any, saving: SpeechSaving, save_adapter: Callable[..., None]) -> None:
    """The notebook's four saving calls on a speech model; the pushes upload what the saves write."""
    setattr(model, SAVING_ATTRIBUTE, saving)
    model.save_pretrained = MethodType(save_adapter, model)
    model.save_pretrained_merged = MethodType(save_speech_merged, model)
    model.push_to_hub = MethodType(hub.model_push_to_hub, model)
    model.push_to_hub_merged = MethodType(hub.push_to_hub_merged, model)


def _mlx_place(saving: SpeechSaving, name: str, ndim: int) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """mlx-audio's name for transformers' tensor `name`, and the axis order the loader gives it (None: not held)."""
    shape = PROBE_SIZES[:ndim]
    # uint32 keeps the probe out of the loader's dtype cast.
    mapped = saving.to_mlx({name: mx.zeros(shape, dtype=mx.uint32)})
    if not mapped:
        return None
    ((own, probe),) = mapped.items()
    return own, tuple(shape.index(size) for size in probe.shape)


def transformers_weights(model: Any, saving: SpeechSaving) -> Dict[str, mx.array]:
    """The source folder's tensors with the MLX model's (LoRA folded in) in their place, under transformers' names;
    tensors MLX does not hold (the Mimi codec, Whisper's fixed sinusoids) are written as the folder has them."""
    trained = merged_weights(model)
    written, used = {}, set()
    for path in sorted(Path(saving.source).glob("*.safetensors")):
        for name, value in mx.load(str(path)).items():
            place = _mlx_place(saving, name, value.ndim)
            if place is None:
                written[name] = value
                continue
            own, order = place
            if own not in trained:
                raise ValueError(f"{saving.kind}'s tensor {name} maps to {own}, which the MLX model does not hold")
            written[name] = trained[own].transpose(sorted(range(len(order)), key=order.__getitem__))
            used.add(own)
    unnamed = sorted(set(trained) - used)
    if unnamed:
        raise ValueError(f"the MLX {saving.kind} holds tensors with no transformers name: {', '.join(unnamed[:5])}")
    return written


def _check_method(saving: SpeechSaving, save_method: str) -> str:
    method = normalised_name(save_method)
    if method == "merged_4bit":
        raise NotImplementedError(
            f"save_method='merged_4bit' for {saving.kind} on MLX: CUDA Unsloth writes bitsandbytes' 4-bit format, "
            "which needs CUDA, and MLX's 4-bit format is built for text and vision models only; use merged_16bit"
        )
    if method == "mxfp4":
        raise NotImplementedError(
            f"save_method='mxfp4' is for gpt-oss models ({', '.join(MXFP4_MODEL_TYPES)}), not {saving.kind}; "
            "use merged_16bit"
        )
    if method not in (*MERGED_METHODS, "lora"):
        raise NotImplementedError(
            f"save_method={save_method!r} is not available for {saving.kind} on MLX; use one of "
            f"{', '.join(MERGED_METHODS)} or lora"
        )
    return method


def _in_dtype(value: mx.array, method: str) -> mx.array:
    if not mx.issubdtype(value.dtype, mx.floating):
        return value
    return sixteen_bit(value) if method == "merged_16bit" else value.astype(mx.float32)


def save_speech_merged(
    model: Any, save_directory: str | Path, tokenizer: Any = None, save_method: str = "merged_16bit", **kwargs: Any
) -> Path:
    """A transformers folder (weights, config, generation config, processor) that `from_pretrained` loads;
    `save_method="lora"` writes the adapter, as `save_pretrained` does. The model in memory keeps its adapters."""
    check_merged_keywords(kwargs)
    saving: SpeechSaving = getattr(model, SAVING_ATTRIBUTE)
    method = _check_method(saving, save_method)
    folder = Path(save_directory)
    if method == "lora":
        model.save_pretrained(folder, tokenizer)
        return folder
    weights = {name: _in_dtype(value, method) for name, value in transformers_weights(model, saving).items()}
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    config = model.config.to_dict()
    config["dtype"] = {mx.float16: "float16", mx.bfloat16: "bfloat16"}.get(
        next(v.dtype for v in weights.values() if mx.issubdtype(v.dtype, mx.floating)), "float32"
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    model.generation_config.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder
