# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastVisionModel` on MLX: a vision-language model and its processor through mlx-vlm, LoRA on the layers a
vision notebook picks, and the adapter's save and reload; `UnslothVisionDataCollator` lives in `vision_collator`.

A folder holding only a saved vision adapter loads its base (quantized as it was when trained) with the adapter on
top. `load_in_4bit` / `load_in_8bit` quantize the language model; the vision tower stays in floating point.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Optional, Sequence, Set, Tuple

import mlx.core as mx

from unsloth_zoo.mlx.loading import resolve_model_folder, warn_kv_shared_layers
from unsloth_zoo.mlx.lora import FULL_FINETUNING_ATTRIBUTE
from unsloth_zoo.mlx.checkpointing import request_gradient_checkpointing

from ..training.arguments import MODEL_MAX_SEQ_LENGTH_ATTRIBUTE
from ..models.keywords import VISION_LOAD_USED, VISION_PEFT_USED, check_load_keywords, check_peft_keywords
from ..models.language import BASE_MODEL_ATTRIBUTE, _dtype, adapter_base, load_quantization, print_trainable_parameters
from ..models import hub
from ..models.main_rank import write_on_main_rank_only
from ..models.methods import apply_model_habits
from ..models.quantize import QUANTIZATION_ATTRIBUTE, Quantization, model_quantization, quantize_model
from .collator import UnslothVisionDataCollator
from ..models.fast_inference import write_peft_beside
from .fast_inference import attach_vision_fast_inference, attach_vision_save_lora, vision_peft_config
from .generation import attach_generate
from .merged import SOURCE_FOLDER_ATTRIBUTE, save_vision_gguf, save_vision_merged
from .lora import (
    VisionLoraSettings,
    apply_vision_lora,
    audio_only_names,
    choose_paths,
    load_vision_adapter,
    read_vision_adapter,
    save_vision_adapter,
    vision_lora_settings,
)
from .backend import load_model_and_processor, model_family
from .processors import REPO_CODE_MODEL_METHODS, save_processor

__all__ = ["FastVisionModel", "UnslothVisionDataCollator"]

# A vision model also answers a text model's call, so text-only rows (no images) train and score on it: mlx-vlm's
# models want `pixel_values` and return an output object, while the text trainer calls `model(tokens)` for logits.
# One subclass is made for each mlx-vlm class, so every model of a family shares one.
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


DEFAULT_MAX_SEQ_LENGTH = 2048
IMAGE_TEXT_AUTO_CLASSES = ("AutoModelForImageTextToText", "AutoModelForVision2Seq")


def own_auto_models(config: Dict[str, Any]) -> Set[str]:
    """The `auto_model` names that build this checkpoint whole: the image-text Auto classes, its own classes, and an
    Auto class its remote code maps to one of them (PaddleOCR-VL's `auto_map` maps AutoModelForCausalLM so)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    own = set(config.get("architectures") or ())
    own.add(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(config.get("model_type"), IMAGE_TEXT_AUTO_CLASSES[0]))
    remote = {
        auto
        for auto, reference in (config.get("auto_map") or {}).items()
        if isinstance(reference, str) and reference.rsplit(".", 1)[-1] in own
    }
    return {*IMAGE_TEXT_AUTO_CLASSES, *own, *remote}


def check_vision_auto_model(owner: str, auto_model: Any, folder: str | Path) -> None:
    """Refuse by name an `auto_model` that would not build the checkpoint in `folder` with its towers."""
    if auto_model is None:
        return
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    name = getattr(auto_model, "__name__", repr(auto_model))
    accepted = own_auto_models(config)
    if name not in accepted:
        raise NotImplementedError(
            f"{owner} on MLX cannot honour auto_model={name}: this checkpoint is {config.get('model_type')!r} with "
            f"its vision tower, which mlx-vlm loads as its own family; pass auto_model={' or '.join(sorted(accepted))} "
            "or leave it out"
        )


def _save_pretrained(model: Any, save_directory: str | Path, tokenizer: Any = None, **_: Any) -> None:
    """The adapter (with its base and quantization named) and the processor beside it."""
    folder = Path(save_directory)
    if getattr(model, FULL_FINETUNING_ATTRIBUTE, False) and vision_lora_settings(model) is None:
        # A full fine-tune has no adapter: the whole model is saved, as CUDA Unsloth's save_pretrained does.
        save_vision_merged(model, folder, tokenizer)
        return
    save_vision_adapter(model, folder)
    write_peft_beside(model, folder, vision_peft_config(model))  # the PEFT files CUDA Unsloth's save_pretrained writes
    if tokenizer is not None:
        save_processor(tokenizer, folder)


def _save_pretrained_merged(
    model: Any, save_directory: str | Path, tokenizer: Any = None, save_method: str = "merged_16bit", **kwargs: Any
) -> Path:
    """The merged model, or for save_method="lora" the adapter as `save_pretrained` writes it (as for text models)."""
    if save_method == "lora":
        _save_pretrained(model, save_directory, tokenizer)
        return Path(save_directory)
    return save_vision_merged(model, save_directory, tokenizer, save_method, **kwargs)


def _quantize_language(model: Any, quantization: Quantization) -> None:
    quantize_model(model.language_model, quantization)
    setattr(model, QUANTIZATION_ATTRIBUTE, quantization)


class FastVisionModel:
    @staticmethod
    def from_pretrained(
        model_name: str | Path,
        max_seq_length: Optional[int] = None,
        dtype: Any = None,
        load_in_4bit: bool = False,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        """The model (a local folder or a Hub id) and its processor, as vision notebooks unpack them."""
        auto_model = kwargs.pop("auto_model", None)
        check_load_keywords("FastVisionModel.from_pretrained", kwargs, VISION_LOAD_USED)
        quantization = load_quantization(
            load_in_4bit, kwargs.get("load_in_8bit"), full_finetuning, kwargs.get("load_in_fp8")
        )
        token, revision = kwargs.get("token"), kwargs.get("revision")
        folder = resolve_model_folder(model_name, token=token, revision=revision)
        adapter = read_vision_adapter(folder)
        if adapter is not None:
            base, flags = adapter_base(folder, adapter, quantization)
            model, processor = FastVisionModel.from_pretrained(
                base, max_seq_length, dtype, token=token, fast_inference=kwargs.get("fast_inference"), **flags
            )
            check_vision_auto_model(
                "FastVisionModel.from_pretrained", auto_model, getattr(model, SOURCE_FOLDER_ATTRIBUTE)
            )
            return request_gradient_checkpointing(load_vision_adapter(model, folder, adapter), kwargs), processor
        if not folder.is_dir():
            raise FileNotFoundError(f"no model folder at {folder}, and {str(model_name)!r} is not a Hub id (org/name)")
        check_vision_auto_model("FastVisionModel.from_pretrained", auto_model, folder)
        model, processor = load_model_and_processor(folder)
        warn_kv_shared_layers(model)
        # Text-only rows (a notebook training a multimodal checkpoint on text) then train through the text trainer.
        accept_text_calls(model)
        if dtype is not None:
            model.set_dtype(_dtype(dtype))
        if quantization is not None:
            _quantize_language(model, quantization)
        setattr(model, BASE_MODEL_ATTRIBUTE, str(model_name))
        setattr(model, FULL_FINETUNING_ATTRIBUTE, bool(full_finetuning))
        setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, int(max_seq_length or DEFAULT_MAX_SEQ_LENGTH))
        setattr(model, SOURCE_FOLDER_ATTRIBUTE, str(folder))
        model.save_pretrained = MethodType(_save_pretrained, model)
        model.save_pretrained_merged = MethodType(_save_pretrained_merged, model)
        model.print_trainable_parameters = MethodType(print_trainable_parameters, model)
        # The text models' pushes, each uploading what the matching save writes here.
        model.push_to_hub = MethodType(hub.model_push_to_hub, model)
        model.push_to_hub_merged = MethodType(hub.push_to_hub_merged, model)
        model.save_pretrained_gguf = MethodType(save_vision_gguf, model)
        model.push_to_hub_gguf = MethodType(hub.push_to_hub_gguf, model)
        attach_generate(model, processor)
        for name, method in REPO_CODE_MODEL_METHODS.get(model_family(model), {}).items():
            setattr(model, name, MethodType(method, model))
        attach_vision_save_lora(model)
        if kwargs.get("fast_inference"):
            # vLLM's calls (fast_generate, save_lora, load_lora), decoded by mlx-vlm.
            attach_vision_fast_inference(model, processor)
        write_on_main_rank_only(model)
        write_on_main_rank_only(processor)
        apply_model_habits(model)
        return request_gradient_checkpointing(model, kwargs), processor

    @staticmethod
    def get_peft_model(
        model: Any,
        r: int = 16,
        lora_alpha: float = 16,
        lora_dropout: float = 0.0,
        target_modules: Optional[Sequence[str] | str] = None,
        random_state: int = 3407,
        **kwargs: Any,
    ) -> Any:
        """LoRA on the layers the finetune_* switches pick (all four default to True); the model is returned."""
        check_peft_keywords("FastVisionModel.get_peft_model", kwargs, VISION_PEFT_USED)
        if getattr(model, FULL_FINETUNING_ATTRIBUTE, False):
            # CUDA Unsloth's answer too: a full-finetuning load trains every weight, so no LoRA goes on top.
            print("Unsloth: Full finetuning is enabled, so .get_peft_model has no effect")
            return request_gradient_checkpointing(model, kwargs)
        if vision_lora_settings(model) is not None:
            raise ValueError("this model already has LoRA adapters; load the base again to start over")
        names = (
            None
            if target_modules in (None, "all-linear")
            else [target_modules]
            if isinstance(target_modules, str)
            else list(target_modules)
        )
        if kwargs.get("finetune_audio_layers") and getattr(model, "audio_tower", None) is None:
            raise NotImplementedError(
                "finetune_audio_layers=True: this checkpoint has no audio tower (its config has no audio_config); "
                "leave finetune_audio_layers off"
            )
        # Off unless asked, as upstream; the audio notebooks' target_modules name audio-only modules, which asks.
        audio = bool(kwargs.get("finetune_audio_layers")) or bool(audio_only_names(model, names))
        paths = choose_paths(
            model,
            audio=audio,
            vision=bool(kwargs.get("finetune_vision_layers", True)),
            language=bool(kwargs.get("finetune_language_layers", True)),
            attention=bool(kwargs.get("finetune_attention_modules", True)),
            mlp=bool(kwargs.get("finetune_mlp_modules", True)),
            target_modules=names,
        )
        # rsLoRA scales by alpha / sqrt(r); the layer divides by r, so alpha carries sqrt(r).
        alpha = lora_alpha * math.sqrt(r) if kwargs.get("use_rslora") else lora_alpha
        mx.random.seed(int(random_state))
        quantization = model_quantization(model)
        apply_vision_lora(
            model,
            VisionLoraSettings(
                rank=int(r),
                alpha=float(alpha),
                dropout=float(lora_dropout),
                paths=tuple(paths),
                base_model=getattr(model, BASE_MODEL_ATTRIBUTE, None),
                quantization=None if quantization is None else quantization.as_dict(),
            ),
        )
        if kwargs.get("max_seq_length") is not None:
            setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, int(kwargs["max_seq_length"]))
        return request_gradient_checkpointing(model, kwargs)

    @staticmethod
    def for_inference(model: Any) -> Any:
        model.eval()
        return model

    @staticmethod
    def for_training(model: Any, use_gradient_checkpointing: Any = True) -> Any:
        model.train()
        return model
