# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Every keyword of CUDA Unsloth's `from_pretrained` and `get_peft_model`, and what MLX does with it: one table that
`FastLanguageModel`, `FastModel` and `FastVisionModel` all check against, so they accept the same calls.

A keyword is used (the entry point reads it), inert (it only steers CUDA: any value loads, a set one warns once), or
default-only (accepted at the values that change nothing; any other value is refused by name).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional, Tuple

from .speech import SPEECH_KEYWORDS, keyword_refusal

OFF = (None, False)
# FastModel passes its own name under this keyword to the FastLanguageModel call it wraps, so refusals name it.
ENTRY_POINT_KEYWORD = "_unsloth_entry_point"
CHECKPOINTING = (None, False, True, "unsloth")

LOAD_INERT: Dict[str, Tuple[Any, ...]] = {
    "device_map": (None, "sequential", "auto"),
    "device_map_planner_kwargs": (None,),
    "trust_remote_code": OFF,
    "attn_implementation": (None,),
    "use_gradient_checkpointing": CHECKPOINTING,
    "local_files_only": (None, False, True),
    "cache_dir": (None,),
    "use_exact_model_name": OFF,
    "gpu_memory_utilization": (None, 0.5),
    "max_lora_rank": (None, 16, 64),
    # CUDA Unsloth moves the embedding to CPU memory to save VRAM; Apple's memory is unified, so there is none to save.
    "offload_embedding": (None, False, "auto"),
    "disable_log_stats": (None, False, True),
    "random_state": (None, 3407),
    "load_in_16bit": (None, False, True),
    # The tokenizer is used as saved on MLX, so there is nothing for either value to change.
    "fix_tokenizer": (None, True, False),
    # Tiling the MLP only saves CUDA memory; the result is the same.
    "unsloth_tiled_mlp": OFF,
    # torch.compile switches (the Nemotron 3 Nano notebook forces it): MLX has no torch graph to compile.
    "unsloth_force_compile": OFF,
    "fullgraph": (None, True),
}
LOAD_DEFAULT_ONLY: Dict[str, Tuple[Any, ...]] = {
    "rope_scaling": (None,),
    "resize_model_vocab": (None,),
    "float8_kv_cache": OFF,
    "float32_mixed_precision": OFF,
    "fast_inference": OFF,
    "auto_model": (None,),
    "return_logits": OFF,
    "whisper_language": (None,),
    "whisper_task": (None,),
    "qat_scheme": (None,),
    "load_in_fp8": OFF,
    "target_parameters": (None, []),
    "text_only": OFF,
    "on_model_resolved": (None,),
}
PEFT_INERT: Dict[str, Tuple[Any, ...]] = {
    "use_gradient_checkpointing": CHECKPOINTING,
    "temporary_location": (None, "_unsloth_temporary_saved_buffers"),
    # On MLX a tied lm_head is the embedding itself, so the two stay tied whatever is asked.
    "ensure_weight_tying": (None, False, True),
    "offload_layers": (None,),
    "checkpoint_skip_layers": (None, 0),
}
PEFT_DEFAULT_ONLY: Dict[str, Tuple[Any, ...]] = {
    "bias": (None, "none"),
    "loftq_config": (None, {}),
    "init_lora_weights": (None, True),
    "use_dora": OFF,
    "layers_to_transform": (None,),
    "layers_pattern": (None,),
    "rank_pattern": (None, {}),
    "alpha_pattern": (None, {}),
    "finetune_last_n_layers": (None,),
    "qat_scheme": (None,),
    "target_parameters": (None, []),
    "task_type": (None, "CAUSAL_LM"),
    "finetune_audio_layers": OFF,
    "modules_to_save": (None, []),
    "use_rslora": OFF,
    "max_seq_length": (None,),
    "finetune_vision_layers": OFF,
    "finetune_language_layers": (None, True),
    "finetune_attention_modules": (None, True),
    "finetune_mlp_modules": (None, True),
}
# What each entry point reads itself, beyond its named parameters.
TEXT_LOAD_USED = (
    "token",
    "revision",
    "load_in_4bit",
    "load_in_8bit",
    "load_in_fp8",
    "fast_inference",
    "use_gradient_checkpointing",
    "text_only",
    "qat_scheme",
)
VISION_LOAD_USED = (
    "token",
    "revision",
    "load_in_4bit",
    "load_in_8bit",
    "load_in_fp8",
    "fast_inference",
    "use_gradient_checkpointing",
)
TEXT_PEFT_USED = ("modules_to_save", "use_gradient_checkpointing", "qat_scheme")
VISION_PEFT_USED = (
    "finetune_vision_layers",
    "finetune_audio_layers",
    "finetune_language_layers",
    "finetune_attention_modules",
    "finetune_mlp_modules",
    "use_rslora",
    "use_gradient_checkpointing",
    "max_seq_length",
)


def check_keywords(
    owner: str, given: Dict[str, Any], inert: Dict[str, Tuple], default_only: Dict[str, Tuple], used: Tuple = ()
) -> None:
    """Refuse unknown and changed default-only keywords, all named at once; one warning names inert ones set."""
    unknown = sorted(set(given) - set(inert) - set(default_only) - set(used))
    if unknown:
        raise NotImplementedError(f"{owner} on MLX does not support {', '.join(unknown)}")
    changed = [
        name
        for name in sorted((set(given) & set(default_only)) - set(used))
        if carries_value(given[name], default_only[name])
    ]
    # Whisper's keywords reach this table only on a checkpoint that is not a Whisper, which is their own reason.
    for name in changed:
        if name in SPEECH_KEYWORDS:
            raise NotImplementedError(f"{owner} on MLX cannot honour {name}={given[name]!r}: {keyword_refusal(name)}")
    changed = [f"{name}={given[name]!r}" for name in changed]
    if changed:
        raise NotImplementedError(
            f"{owner} on MLX cannot honour {', '.join(changed)}; leave them at the default "
            "(MLX trains LoRA on a 16/32-bit, 4-bit or 8-bit base, or full fine-tunes)"
        )
    ignored = [name for name in given if name in inert and name not in used and carries_value(given[name], inert[name])]
    if ignored:
        warnings.warn(
            f"{owner}: {', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect on MLX and "
            f"{'is' if len(ignored) == 1 else 'are'} ignored",
            RuntimeWarning,
            stacklevel=4,
        )


def check_load_keywords(owner: str, given: Dict[str, Any], used: Tuple = TEXT_LOAD_USED) -> None:
    check_keywords(owner, given, LOAD_INERT, LOAD_DEFAULT_ONLY, used)


def check_peft_keywords(owner: str, given: Dict[str, Any], used: Tuple = TEXT_PEFT_USED) -> None:
    check_keywords(owner, given, PEFT_INERT, PEFT_DEFAULT_ONLY, used)


# ---- how a notebook's value is read, and the context length a model was loaded for ------------------------


def plain_value(value: Any) -> Any:
    """An enum member as its value (Hugging Face stores strategies and hub options as enums)."""
    return getattr(value, "value", value)


def carries_value(value: Any, quiet_values: Tuple[Any, ...]) -> bool:
    """True when `value` asks for something: it is none of the values that mean "nothing asked for"."""
    value = plain_value(value)
    if isinstance(value, (list, tuple)):
        value = [plain_value(item) for item in value]
    # bool is an int subclass, so `1 == True`; compare types too so fp16=1 is not taken for a default.
    return not any(type(value) is type(quiet) and value == quiet or value is quiet for quiet in quiet_values)


def normalised_name(value: Any) -> str:
    """`OptimizerNames.ADAMW_TORCH`, "SchedulerType.COSINE" or "Adamw-Torch" as "adamw_torch" / "cosine"."""
    text = str(getattr(value, "value", value))
    return text.strip().rsplit(".", 1)[-1].lower().replace("-", "_")


# The attribute the loaders set to the max_seq_length a model was loaded for; the trainer reads it back.
MODEL_MAX_SEQ_LENGTH_ATTRIBUTE = "max_seq_length"


def model_context_limit(model: Any) -> Optional[int]:
    """The longest sequence the model's positions cover, from its config (mlx_lm keeps it on `model.args`)."""
    limit = getattr(getattr(model, "args", None), "max_position_embeddings", None)
    return int(limit) if limit else None
