# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastSentenceTransformer` on MLX: the embedding notebooks' `from_pretrained` and `get_peft_model`.

It loads a sentence-transformers folder (or a bare Hugging Face encoder, mean-pooled as ST does) into MLX and puts
LoRA on the named modules with the zoo's `apply_lora`, as FastLanguageModel does; `full_finetuning=True` trains
every weight instead. The keywords are the shared table's (`models/keywords.py`), with FEATURE_EXTRACTION allowed.
"""

from __future__ import annotations

import math
from types import MethodType
from typing import Any, Optional, Sequence

import mlx.core as mx

from unsloth_zoo.mlx.loading import resolve_model_folder
from unsloth_zoo.mlx.lora import FULL_FINETUNING_ATTRIBUTE, apply_lora

from ..models.methods import apply_model_habits
from ..models.keywords import (
    LOAD_DEFAULT_ONLY,
    LOAD_INERT,
    PEFT_DEFAULT_ONLY,
    PEFT_INERT,
    check_keywords,
)
from .adapters import is_adapter_folder, load_adapter, read_adapter_config
from .backbone import backbone_for, load_backbone, read_config
from .folder import read_folder
from .pooling import load_dense
from .model import SentenceEmbeddingModel
from .gguf_saving import attach_gguf
from .saving import attach_saving

OWNER = "FastSentenceTransformer"
# The embedding notebooks' task; CAUSAL_LM is not refused either, since the LoRA is the same.
EMBEDDING_TASKS = (None, "FEATURE_EXTRACTION", "CAUSAL_LM")
LOAD_USED = ("token", "revision", "dtype", "load_in_4bit", "load_in_8bit", "for_inference")
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def _dtype(value: Any) -> Optional[Any]:
    if value is None:
        return None
    name = str(value).rsplit(".", 1)[-1]
    if name not in DTYPES:
        raise NotImplementedError(f"{OWNER}.from_pretrained(dtype={value!r}): MLX loads {', '.join(DTYPES)}")
    return DTYPES[name]


def _refuse_quantized(kwargs: dict) -> None:
    for name in ("load_in_4bit", "load_in_8bit"):
        if kwargs.get(name):
            raise NotImplementedError(
                f"{OWNER}.from_pretrained({name}=True): embedding models load in 16/32-bit on MLX "
                "(mlx-embeddings' encoders are not quantized for training here)"
            )


class FastSentenceTransformer:
    @staticmethod
    def from_pretrained(
        model_name: str,
        max_seq_length: Optional[int] = None,
        full_finetuning: bool = False,
        dtype: Any = None,
        **kwargs: Any,
    ) -> SentenceEmbeddingModel:
        """The folder's backbone (mlx-embeddings), pooling, Dense layers, normalization and prompts, on MLX."""
        check_keywords(f"{OWNER}.from_pretrained", kwargs, LOAD_INERT, LOAD_DEFAULT_ONLY, LOAD_USED)
        _refuse_quantized(kwargs)
        folder = resolve_model_folder(model_name, kwargs.get("token"), kwargs.get("revision"))
        if is_adapter_folder(folder):
            # A folder save_pretrained wrote for a LoRA model: its base, then the adapters on top.
            base = read_adapter_config(folder)["base_model_name_or_path"]
            model = FastSentenceTransformer.from_pretrained(base, max_seq_length, full_finetuning, dtype, **kwargs)
            load_adapter(model, folder)
            return model
        config = read_config(folder)
        family = backbone_for(config["model_type"])
        spec = read_folder(folder)
        backbone = load_backbone(folder, config, _dtype(dtype))
        dense = [load_dense(folder, layer) for layer in spec.dense]
        model = SentenceEmbeddingModel(backbone, family, spec, dense)
        from transformers import AutoTokenizer

        object.__setattr__(model, "tokenizer", AutoTokenizer.from_pretrained(str(folder)))
        positions = config.get("max_position_embeddings")
        asked = max_seq_length or spec.max_seq_length or getattr(model.tokenizer, "model_max_length", None)
        limit = int(asked or positions or 512)
        object.__setattr__(model, "max_seq_length", min(limit, int(positions)) if positions else limit)
        object.__setattr__(model, "name_or_path", str(folder))
        object.__setattr__(model, "model_name", str(model_name))
        setattr(model, FULL_FINETUNING_ATTRIBUTE, bool(full_finetuning))
        if full_finetuning:
            model.unfreeze()
        attach_saving(model)
        attach_gguf(model)
        # torch's manners (`.dtype`, `parameters()` that iterate, `.to()`), as every loaded model gets them.
        apply_model_habits(model)
        model.eval()
        return model

    @staticmethod
    def get_peft_model(
        model: SentenceEmbeddingModel,
        r: int = 16,
        target_modules: Optional[Sequence[str]] = None,
        lora_alpha: float = 16,
        lora_dropout: float = 0.0,
        random_state: int = 3407,
        use_rslora: bool = False,
        task_type: Optional[str] = "FEATURE_EXTRACTION",
        **kwargs: Any,
    ) -> SentenceEmbeddingModel:
        """LoRA on `target_modules` in every block (PEFT's suffix match), the rest frozen; the model is returned."""
        default_only = {**PEFT_DEFAULT_ONLY, "task_type": EMBEDDING_TASKS}
        check_keywords(f"{OWNER}.get_peft_model", {**kwargs, "task_type": task_type}, PEFT_INERT, default_only)
        if getattr(model, FULL_FINETUNING_ATTRIBUTE, False):
            print("Unsloth: Full finetuning is enabled, so .get_peft_model has no effect")
            return model
        if target_modules is None:
            raise ValueError(f"{OWNER}.get_peft_model needs target_modules (the notebooks name them)")
        targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
        alpha = lora_alpha * math.sqrt(r) if use_rslora else lora_alpha
        mx.random.seed(int(random_state))
        apply_lora(
            model, rank=r, alpha=alpha, dropout=lora_dropout, target_modules=targets, base_model=model.name_or_path
        )
        object.__setattr__(model, "peft_targets", tuple(targets))
        object.__setattr__(model, "lora_alpha", float(lora_alpha))
        from ..models.language import print_trainable_parameters

        model.print_trainable_parameters = MethodType(print_trainable_parameters, model)
        return model
