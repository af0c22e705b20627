# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastModel`, the entry point of newer notebooks (Gemma 3 and on), for text models on MLX.

Loading is `FastLanguageModel`'s, with the published defaults (4-bit unless a full fine-tune is asked for);
`get_peft_model`'s `finetune_*` switches choose every linear under a block's attention and MLP parts. Vision layers
are not part of a text model, so asking to train them is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from .keywords import ENTRY_POINT_KEYWORD
from .language import FastLanguageModel

# CUDA Unsloth's tags for a block's attention and MLP parts: a linear under a part whose name holds one is chosen.
ATTENTION_TAGS = ("self_attn", "attention", "attn", "mixer")
MLP_TAGS = ("mlp", "feed_forward", "ffn", "dense", "mixer")


def _under(path: str, tags: Tuple[str, ...]) -> bool:
    parts = path.split(".")[:-1]
    # A MoE router picks experts; CUDA does not adapt it (it is no nn.Linear there), so neither do the switches.
    return "router" not in path.split(".") and any(tag in part for part in parts for tag in tags)


def peft_targets(
    model: Any,
    vision: Optional[bool],
    language: Optional[bool],
    attention: Optional[bool],
    mlp: Optional[bool],
) -> Tuple[str, ...]:
    """Every linear (block-relative path) under the attention and MLP parts the switches ask for, in any block, so
    hybrid models (LFM2's `out_proj` and `w1`..`w3`) are covered; None means the published default (on)."""
    from unsloth_zoo.mlx.lora import adaptable_paths

    if vision:
        raise NotImplementedError(
            "finetune_vision_layers=True: this is a text model on MLX, with no vision layers to train; "
            "pass finetune_vision_layers=False"
        )
    if language is False:
        raise NotImplementedError("finetune_language_layers=False leaves a text model nothing to train; leave it True")
    tags = (ATTENTION_TAGS if attention is not False else ()) + (MLP_TAGS if mlp is not False else ())
    if not tags:
        raise NotImplementedError(
            "finetune_attention_modules=False with finetune_mlp_modules=False leaves nothing to train; "
            "turn one of them on"
        )
    paths = adaptable_paths(model.layers)
    targets = tuple(path for path in paths if _under(path, tags))
    if not targets:
        raise ValueError(
            "finetune_attention_modules / finetune_mlp_modules: no linear of this model sits under an attention "
            f"or MLP part; pass target_modules from its adaptable paths: {', '.join(paths)}"
        )
    return targets


def check_auto_model(auto_model: Any, model: Any) -> None:
    """`auto_model` may name the checkpoint's own causal-LM class (or the Auto class); mlx-lm builds that family's
    model, so any other class is refused by name."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if auto_model is None:
        return
    name = getattr(auto_model, "__name__", repr(auto_model))
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    own = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if name not in ("AutoModelForCausalLM", own):
        raise NotImplementedError(
            f"FastModel.from_pretrained on MLX cannot honour auto_model={name}: this checkpoint is {model_type!r}, "
            f"which mlx-lm loads as its own family; pass auto_model={own or 'AutoModelForCausalLM'} or leave it out"
        )


class FastModel(FastLanguageModel):
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
        """As `FastLanguageModel.from_pretrained`; 4-bit by default, unquantized when `full_finetuning=True`."""
        if load_in_4bit is None:
            load_in_4bit = not full_finetuning and not load_in_8bit and not kwargs.get("load_in_fp8")
        auto_model = kwargs.pop("auto_model", None)
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name,
            max_seq_length,
            dtype,
            load_in_4bit=load_in_4bit,
            full_finetuning=full_finetuning,
            load_in_8bit=load_in_8bit,
            **kwargs,
            **{ENTRY_POINT_KEYWORD: "FastModel.from_pretrained"},
        )
        check_auto_model(auto_model, model)
        return model, tokenizer

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
        """LoRA on the projections the `finetune_*` switches choose, unless `target_modules` names them."""
        targets = peft_targets(
            model, finetune_vision_layers, finetune_language_layers, finetune_attention_modules, finetune_mlp_modules
        )
        chosen = targets if target_modules is None else target_modules
        kwargs[ENTRY_POINT_KEYWORD] = "FastModel.get_peft_model"
        return FastLanguageModel.get_peft_model(model, r=r, target_modules=chosen, lora_alpha=lora_alpha, **kwargs)
