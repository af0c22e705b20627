# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastModel` and `FastLanguageModel` as notebooks import them: a checkpoint with a vision or audio tower of a family vision training accepts
(Gemma 3 4B and up, Gemma 4, Qwen VL, ...) loads with its towers through mlx-vlm and returns its processor, as CUDA
Unsloth's FastModel does (Gemma 3n's image parts are then refused when training); any other checkpoint is a text
model through mlx-lm (`models.fast_model`). CUDA Unsloth's `FastLanguageModel` hands every family outside its own
text list to `FastModel`, so here too a checkpoint with towers loads as `FastModel` loads it.

It lives in the vision layer because the text layer below cannot load vision models.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from unsloth_zoo.mlx.loading import resolve_model_folder

from ..models.fast_model import FastModel as FastTextModel
from ..models.language import FastLanguageModel as TextLanguageModel
from ..speech.csm import is_csm, is_csm_folder
from ..speech.loading import from_pretrained_csm, from_pretrained_whisper, get_peft_model_csm, get_peft_model_whisper
from ..speech.whisper import is_whisper, is_whisper_folder
from .backend import REFUSED, routed_model_type, trainable_families, vision_tower
from .lora import read_vision_adapter
from .merged import SOURCE_FOLDER_ATTRIBUTE
from .model import FastVisionModel, check_vision_auto_model

logger = logging.getLogger(__name__)
# Where a config names its towers; Qwen Omni checkpoints nest them under the thinker.
TOWER_KEYS = ("vision_config", "audio_config")


def has_towers(config: Dict[str, Any]) -> bool:
    """True when a checkpoint's config.json holds a vision or audio tower (CUDA's rule for its vision path)."""
    thinker = config.get("thinker_config") or {}
    return any(key in config or key in thinker for key in TOWER_KEYS)


def _vision_family(config: Dict[str, Any]) -> str:
    """The mlx-vlm module that would build this config."""
    model_type = str(config.get("model_type", ""))
    try:
        from mlx_vlm.utils import MODEL_REMAPPING
    except ImportError:
        return model_type
    return routed_model_type(config) or str(MODEL_REMAPPING.get(model_type, model_type))


def loads_as_vision(model_name: str | Path, token: Optional[str], revision: Optional[str]) -> bool:
    """True for a saved vision adapter, and for a checkpoint with towers whose family vision training accepts; a
    checkpoint with towers of any other family (or without mlx-vlm) keeps loading as text, as it did before."""
    folder = resolve_model_folder(model_name, token=token, revision=revision)
    if read_vision_adapter(folder) is not None:
        return True
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if not has_towers(config):
        return False
    family = _vision_family(config)
    if family in trainable_families():
        return True
    logger.warning(
        "FastModel: %s has vision or audio towers, but mlx-vlm's %r is not among the vision families that train on "
        "MLX (%s); its language model alone is loaded through mlx-lm",
        model_name,
        family,
        REFUSED.get(family, "not an mlx-vlm vision family, or mlx-vlm is not installed"),
    )
    return False


def _is_vision_model(model: Any) -> bool:
    return vision_tower(model) is not None


class FastModel(FastTextModel):
    @staticmethod
    def from_pretrained(  # type: ignore[override]
        model_name: str | Path = "unsloth/Llama-3.2-1B-Instruct",
        max_seq_length: Optional[int] = 2048,
        dtype: Any = None,
        load_in_4bit: Optional[bool] = None,
        load_in_8bit: bool = False,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        """A multimodal checkpoint as `FastVisionModel.from_pretrained` loads it (model and processor), else (or with
        `text_only=True`) a text model as `FastLanguageModel`'s; 4-bit by default unless a full fine-tune is asked for."""
        # text_only=True keeps only the language model (mlx-lm drops the towers), as upstream's text_only does.
        text_only = bool(kwargs.pop("text_only", False))
        folder = resolve_model_folder(model_name, token=kwargs.get("token"), revision=kwargs.get("revision"))
        if is_whisper_folder(folder):
            return from_pretrained_whisper(
                "FastModel.from_pretrained", folder, dtype, load_in_4bit, load_in_8bit, kwargs
            )
        if is_csm_folder(folder):
            return from_pretrained_csm("FastModel.from_pretrained", folder, dtype, load_in_4bit, load_in_8bit, kwargs)
        if text_only or not loads_as_vision(model_name, kwargs.get("token"), kwargs.get("revision")):
            return FastTextModel.from_pretrained(
                model_name, max_seq_length, dtype, load_in_4bit, load_in_8bit, full_finetuning, **kwargs
            )
        if load_in_4bit is None:
            load_in_4bit = not full_finetuning and not load_in_8bit and not kwargs.get("load_in_fp8")
        auto_model = kwargs.pop("auto_model", None)
        model, processor = FastVisionModel.from_pretrained(
            model_name,
            max_seq_length,
            dtype,
            load_in_4bit=load_in_4bit,
            full_finetuning=full_finetuning,
            load_in_8bit=load_in_8bit,
            **kwargs,
        )
        check_vision_auto_model("FastModel.from_pretrained", auto_model, getattr(model, SOURCE_FOLDER_ATTRIBUTE))
        return model, processor

    @staticmethod
    def get_peft_model(  # type: ignore[override]
        model: Any,
        r: int = 16,
        target_modules: Optional[Sequence[str] | str] = None,
        lora_alpha: float = 16,
        finetune_vision_layers: Optional[bool] = None,
        finetune_language_layers: Optional[bool] = None,
        finetune_attention_modules: Optional[bool] = None,
        finetune_mlp_modules: Optional[bool] = None,
        **kwargs: Any,
    ) -> Any:
        """LoRA as `FastVisionModel.get_peft_model` places it on a vision model, else as on a text model."""
        switches = {
            "finetune_vision_layers": finetune_vision_layers,
            "finetune_language_layers": finetune_language_layers,
            "finetune_attention_modules": finetune_attention_modules,
            "finetune_mlp_modules": finetune_mlp_modules,
        }
        if is_whisper(model):
            # The switches go through the keyword table, which refuses the ones Whisper's LoRA cannot honour.
            kwargs.update({name: value for name, value in switches.items() if value is not None})
            return get_peft_model_whisper("FastModel.get_peft_model", model, r, target_modules, lora_alpha, kwargs)
        if is_csm(model):
            kwargs.update({name: value for name, value in switches.items() if value is not None})
            return get_peft_model_csm("FastModel.get_peft_model", model, r, target_modules, lora_alpha, kwargs)
        if not _is_vision_model(model):
            return FastTextModel.get_peft_model(model, r, target_modules, lora_alpha, **switches, **kwargs)
        # A switch left at None keeps FastVisionModel's default (on).
        chosen = {name: value for name, value in switches.items() if value is not None}
        return FastVisionModel.get_peft_model(
            model, r=r, lora_alpha=lora_alpha, target_modules=target_modules, **chosen, **kwargs
        )

    @staticmethod
    def for_inference(model: Any) -> Any:
        if is_whisper(model) or is_csm(model):
            return model.eval()
        return FastVisionModel.for_inference(model) if _is_vision_model(model) else FastTextModel.for_inference(model)

    @staticmethod
    def for_training(model: Any, use_gradient_checkpointing: Any = True) -> Any:
        if is_whisper(model) or is_csm(model):
            return model.train()
        if _is_vision_model(model):
            return FastVisionModel.for_training(model, use_gradient_checkpointing)
        return FastTextModel.for_training(model, use_gradient_checkpointing)


class FastLanguageModel(TextLanguageModel):
    @staticmethod
    def from_pretrained(  # type: ignore[override]
        model_name: str | Path,
        max_seq_length: Optional[int] = None,
        dtype: Any = None,
        load_in_4bit: bool = False,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        """A checkpoint with towers as `FastModel` loads it (model and processor, as the Qwen 3.5 notebooks unpack
        them), any other as the text `FastLanguageModel` (model and tokenizer)."""
        if not kwargs.get("text_only") and loads_as_vision(model_name, kwargs.get("token"), kwargs.get("revision")):
            return FastModel.from_pretrained(
                model_name, max_seq_length, dtype, load_in_4bit=load_in_4bit, full_finetuning=full_finetuning, **kwargs
            )
        return TextLanguageModel.from_pretrained(
            model_name, max_seq_length, dtype, load_in_4bit, full_finetuning, **kwargs
        )

    @staticmethod
    def get_peft_model(  # type: ignore[override]
        model: Any,
        r: int = 16,
        target_modules: Optional[Sequence[str] | str] = None,
        lora_alpha: float = 16,
        **kwargs: Any,
    ) -> Any:
        """LoRA as `FastVisionModel.get_peft_model` places it on a vision model, else as on a text model."""
        if not _is_vision_model(model):
            return TextLanguageModel.get_peft_model(model, r, target_modules, lora_alpha, **kwargs)
        return FastVisionModel.get_peft_model(
            model, r=r, lora_alpha=lora_alpha, target_modules=target_modules, **kwargs
        )


# Older notebooks' per-family entry points: CUDA Unsloth keeps a patched class per architecture, while mlx-lm picks
# it from config.json, so each is `FastLanguageModel` itself (`FastTextModel` is `FastModel`, as upstream).
FastLlamaModel = FastLanguageModel
FastMistralModel = FastLanguageModel
FastQwen2Model = FastLanguageModel
FastQwen3Model = FastLanguageModel
FastQwen3MoeModel = FastLanguageModel
FastGemmaModel = FastLanguageModel
FastGemma2Model = FastLanguageModel
FastCohereModel = FastLanguageModel
FastGraniteModel = FastLanguageModel
FastFalconH1Model = FastLanguageModel
