# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The bert_classification notebook's calls on MLX: `FastModel.from_pretrained(auto_model=
AutoModelForSequenceClassification, num_labels=...)`, `get_peft_model(task_type="SEQ_CLS")`, and saves.

LoRA goes on the named modules as PEFT puts it; the SEQ_CLS task trains the classifier in full, as PEFT's
`modules_to_save` does (plus any the caller names). `save_pretrained` writes PEFT's layout for a LoRA model and
transformers' for a full fine-tune; either loads on CPU torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MethodType
from typing import Any, Dict, List, Optional, Sequence, Tuple

import mlx.core as mx

from unsloth_zoo.mlx.loading import resolve_model_folder
from unsloth_zoo.mlx.lora import FULL_FINETUNING_ATTRIBUTE, apply_lora, lora_settings

from ..models.keywords import LOAD_DEFAULT_ONLY, LOAD_INERT, PEFT_DEFAULT_ONLY, PEFT_INERT, check_keywords
from ..vision.fast_model import FastModel as VisionFastModel
from .classifier import SequenceClassifier, classifier_config, hub_weights, load_classifier
from .fast_sentence_transformer import _dtype

OWNER = "FastModel"
CLASSIFIER_AUTO_MODELS = ("AutoModelForSequenceClassification",)
# The keywords transformers' from_pretrained passes into the classifier's config.
LABEL_KEYWORDS = ("num_labels", "id2label", "label2id", "problem_type", "classifier_pooling", "classifier_dropout")
LOAD_USED = ("token", "revision", "load_in_4bit", "load_in_8bit", "max_seq_length") + LABEL_KEYWORDS
# PEFT's SEQ_CLS task adds these to modules_to_save (those the model has are trained in full and saved).
SEQ_CLS_SAVED = ("classifier", "score")
PEFT_PREFIX = "base_model.model."


def is_classifier_request(auto_model: Any) -> bool:
    return getattr(auto_model, "__name__", None) in CLASSIFIER_AUTO_MODELS


def from_pretrained_classifier(
    model_name: Any, max_seq_length: Optional[int], dtype: Any, full_finetuning: bool, kwargs: Dict[str, Any]
) -> Tuple[SequenceClassifier, Any]:
    owner = f"{OWNER}.from_pretrained(auto_model=AutoModelForSequenceClassification)"
    check_keywords(owner, kwargs, LOAD_INERT, LOAD_DEFAULT_ONLY, LOAD_USED)
    for name in ("load_in_4bit", "load_in_8bit"):
        if kwargs.get(name):
            raise NotImplementedError(
                f"{owner}: {name}=True: the ModernBERT classifier loads in 16/32-bit on MLX (mlx-embeddings' "
                "encoders are not quantized for training here); pass load_in_4bit=False"
            )
    folder = resolve_model_folder(model_name, kwargs.get("token"), kwargs.get("revision"))
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        return _from_adapter(folder, max_seq_length, dtype, kwargs)
    config = classifier_config(folder, {name: kwargs.get(name) for name in LABEL_KEYWORDS if name in kwargs})
    model = load_classifier(folder, config, _dtype(dtype))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    positions = int(config.get("max_position_embeddings") or max_seq_length or 512)
    tokenizer.model_max_length = min(int(max_seq_length or positions), positions)
    object.__setattr__(model, "tokenizer", tokenizer)
    object.__setattr__(model, "name_or_path", str(folder))
    object.__setattr__(model, "model_name", str(model_name))
    setattr(model, FULL_FINETUNING_ATTRIBUTE, bool(full_finetuning))
    # A transformers model trains every weight until LoRA freezes the rest.
    model.unfreeze()
    model.save_pretrained = MethodType(save_pretrained, model)
    return model, tokenizer


def _from_adapter(folder: Path, max_seq_length: Optional[int], dtype: Any, kwargs: Dict[str, Any]) -> Any:
    """A folder `save_pretrained` wrote for a LoRA classifier: its base, the LoRA, then the saved modules."""
    settings = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    # As PEFT's reload: the base as transformers loads it, with the caller's label settings.
    model, tokenizer = from_pretrained_classifier(
        settings["base_model_name_or_path"], max_seq_length, dtype, False, kwargs
    )
    alpha = settings["lora_alpha"] * (math.sqrt(settings["r"]) if settings.get("use_rslora") else 1.0)
    _add_lora(model, settings["r"], alpha, 0.0, settings["target_modules"], settings.get("modules_to_save"))
    loaded = []
    for name, value in mx.load(str(folder / "adapter_model.safetensors")).items():
        inner = name[len(PEFT_PREFIX) :]
        if ".lora_" in inner:
            path, _, part = inner.rpartition(".lora_")
            loaded.append((f"backbone.{path}.lora_{part.split('.', 1)[0].lower()}", value.T))
        else:
            loaded.append((inner if inner.startswith(("head.", "classifier.")) else f"backbone.{inner}", value))
    model.load_weights(loaded, strict=False)
    mx.eval(model.parameters())
    return model, tokenizer


def _block_targets(targets: Sequence[str]) -> List[str]:
    """PEFT's target names (a module name, or a Hub path ending in one) as the names inside a block."""
    return list(
        dict.fromkeys(
            target.rsplit(".layers.", 1)[-1].split(".", 1)[-1] if ".layers." in target else target for target in targets
        )
    )


def _add_lora(model: Any, r: int, alpha: float, dropout: float, targets: Sequence[str], saved: Any) -> None:
    apply_lora(
        model,
        rank=int(r),
        alpha=float(alpha),
        dropout=float(dropout),
        target_modules=_block_targets(targets),
        base_model=model.name_or_path,
    )
    # PEFT trains (and saves) the SEQ_CLS modules and any the caller names in full.
    wanted = list(SEQ_CLS_SAVED) + ([saved] if isinstance(saved, str) else list(saved or ()))
    kept = tuple(name for name in dict.fromkeys(wanted) if name in model)
    for name in kept:
        model[name].unfreeze()
    object.__setattr__(model, "modules_to_save", kept)
    object.__setattr__(model, "peft_targets", tuple(targets))


def get_peft_model_classifier(
    model: SequenceClassifier,
    r: int = 16,
    target_modules: Optional[Sequence[str] | str] = None,
    lora_alpha: float = 16,
    lora_dropout: float = 0.0,
    random_state: int = 3407,
    use_rslora: bool = False,
    task_type: Any = "SEQ_CLS",
    modules_to_save: Any = None,
    **kwargs: Any,
) -> SequenceClassifier:
    """LoRA on `target_modules` (PEFT's suffix match in every block), the classifier trained in full."""
    owner = f"{OWNER}.get_peft_model"
    default_only = {**PEFT_DEFAULT_ONLY, "task_type": (None, "SEQ_CLS")}
    for name in (
        "finetune_vision_layers",
        "finetune_language_layers",
        "finetune_attention_modules",
        "finetune_mlp_modules",
    ):
        kwargs.pop(name, None)
    check_keywords(
        owner, {**kwargs, "task_type": str(getattr(task_type, "value", task_type))}, PEFT_INERT, default_only
    )
    if getattr(model, FULL_FINETUNING_ATTRIBUTE, False):
        print("Unsloth: Full finetuning is enabled, so .get_peft_model has no effect")
        return model
    if target_modules is None or target_modules == "all-linear":
        target_modules = ["Wqkv", "Wo", "Wi"]
    targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    alpha = lora_alpha * math.sqrt(r) if use_rslora else lora_alpha
    mx.random.seed(int(random_state))
    _add_lora(model, r, alpha, lora_dropout, targets, modules_to_save)
    object.__setattr__(model, "lora_alpha", float(lora_alpha))
    object.__setattr__(model, "use_rslora", bool(use_rslora))
    return model


def save_pretrained(model: SequenceClassifier, save_directory: str, *args: Any, **kwargs: Any) -> None:
    """PEFT's adapter folder for a LoRA classifier, else transformers' ModernBertForSequenceClassification folder."""
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    settings = lora_settings(model)
    weights = hub_weights(model)
    if settings is None:
        config = {name: value for name, value in model.hf_config.items()}
        config["id2label"] = {str(key): value for key, value in config["id2label"].items()}
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        _save(folder / "model.safetensors", weights)
        return
    from mlx_lm.tuner.lora import LoRALinear

    adapter: Dict[str, mx.array] = {}
    targets = []
    for path, module in model.backbone.named_modules():
        if isinstance(module, LoRALinear):
            targets.append(path)
            adapter[f"{PEFT_PREFIX}{path}.lora_A.weight"] = module.lora_a.T
            adapter[f"{PEFT_PREFIX}{path}.lora_B.weight"] = module.lora_b.T
    for name in model.modules_to_save:
        adapter.update({f"{PEFT_PREFIX}{key}": value for key, value in weights.items() if key.startswith(name + ".")})
    config = {
        "peft_type": "LORA",
        "task_type": "SEQ_CLS",
        "base_model_name_or_path": model.name_or_path,
        "r": settings.rank,
        "lora_alpha": model.lora_alpha,
        "lora_dropout": settings.dropout,
        "target_modules": sorted(targets),
        "modules_to_save": list(model.modules_to_save),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": bool(getattr(model, "use_rslora", False)),
        "use_dora": False,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
    _save(folder / "adapter_model.safetensors", adapter)


def _save(path: Path, weights: Dict[str, mx.array]) -> None:
    mx.save_safetensors(str(path), weights, metadata={"format": "pt"})


class FastModel(VisionFastModel):
    """`FastModel` with the classifier notebook's route: `auto_model=AutoModelForSequenceClassification`."""

    @staticmethod
    def from_pretrained(  # type: ignore[override]
        model_name: Any = "unsloth/Llama-3.2-1B-Instruct",
        max_seq_length: Optional[int] = 2048,
        dtype: Any = None,
        load_in_4bit: Optional[bool] = None,
        load_in_8bit: bool = False,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        if is_classifier_request(kwargs.get("auto_model")):
            kwargs.pop("auto_model")
            kwargs.update(load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)
            return from_pretrained_classifier(model_name, max_seq_length, dtype, full_finetuning, kwargs)
        return VisionFastModel.from_pretrained(
            model_name, max_seq_length, dtype, load_in_4bit, load_in_8bit, full_finetuning, **kwargs
        )

    @staticmethod
    def get_peft_model(model: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if isinstance(model, SequenceClassifier):
            return get_peft_model_classifier(model, *args, **kwargs)
        if str(getattr(kwargs.get("task_type"), "value", kwargs.get("task_type"))) == "SEQ_CLS":
            raise NotImplementedError(
                "get_peft_model(task_type='SEQ_CLS') needs a classifier: load it with FastModel.from_pretrained("
                "..., auto_model=AutoModelForSequenceClassification, num_labels=...)"
            )
        return VisionFastModel.get_peft_model(model, *args, **kwargs)
