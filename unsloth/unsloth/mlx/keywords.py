# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The keyword tables behind `UnslothTrainingArguments`: aliases, CUDA-only keywords, keywords held at their default.

Every keyword a CUDA notebook may pass lands in exactly one table, or in the backend config's own fields;
anything else is refused by name, so no keyword that changes training is ever dropped quietly.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

# Older or TRL spellings of a backend field; when both spellings are given the backend's name wins.
ALIASES: Dict[str, str] = {
    "max_length": "max_seq_length",
    "evaluation_strategy": "eval_strategy",
}

_OFF = (None, False)
_NO_REPORTING: tuple[object, ...] = (None, "none", "None", [], ["none"], ())

# Keywords that only steer CUDA, hubs or trackers, never the trained weights; each with the values that say
# "nothing asked for". A keyword given any other value is named in the one RuntimeWarning.
INERT_KEYWORDS: Dict[str, Tuple[Any, ...]] = {
    "bf16": _OFF,
    "fp16": _OFF,
    "tf32": _OFF,
    "bf16_full_eval": _OFF,
    "fp16_full_eval": _OFF,
    "half_precision_backend": (None, "auto"),
    "fp16_backend": (None, "auto"),
    "fp16_opt_level": (None, "O1"),
    "dataloader_num_workers": (None, 0),
    "dataloader_pin_memory": (None, True, False),
    "dataloader_persistent_workers": _OFF,
    "dataloader_prefetch_factor": (None,),
    "dataloader_multiprocessing_context": (None,),
    "dataloader_in_order": (None, True),
    "push_to_hub": _OFF,
    "hub_model_id": (None,),
    "hub_token": (None,),
    "hub_strategy": (None, "every_save"),
    "hub_private_repo": _OFF,
    "hub_always_push": _OFF,
    "hub_revision": (None,),
    "report_to": _NO_REPORTING,
    "run_name": (None,),
    "project": (None, "huggingface"),
    "trackio_space_id": (None,),
    "trackio_bucket_id": (None,),
    "trackio_static_space_id": (None,),
    "logging_dir": (None,),
    "logging_nan_inf_filter": (None, True),
    "log_level": (None, "passive"),
    "log_level_replica": (None, "warning"),
    "log_on_each_node": (None, True),
    "disable_tqdm": (None, False, True),
    "debug": (None, "", []),
    "skip_memory_metrics": (None, True),
    "include_num_input_tokens_seen": (None, False, "no"),
    "include_tokens_per_second": _OFF,
    "include_for_metrics": (None, []),
    "gradient_checkpointing": (None, False, True),
    "gradient_checkpointing_kwargs": (None, {}),
    "activation_checkpointing": (None, False, True),
    "activation_checkpointing_kwargs": (None, {}),
    "activation_offloading": _OFF,
    "use_cache": _OFF,
    "torch_compile": _OFF,
    "torch_compile_backend": (None,),
    "torch_compile_mode": (None,),
    "torch_empty_cache_steps": (None,),
    "use_liger_kernel": _OFF,
    "liger_kernel_config": (None,),
    "use_cpu": _OFF,
    "no_cuda": _OFF,
    "use_mps_device": _OFF,
    "local_rank": (None, -1),
    "ddp_find_unused_parameters": (None,),
    "ddp_bucket_cap_mb": (None,),
    "ddp_broadcast_buffers": (None,),
    "ddp_static_graph": (None,),
    "ddp_backend": (None,),
    "ddp_timeout": (None, 1800),
    "average_tokens_across_devices": (None, True, False),
    "save_on_each_node": _OFF,
    "save_safetensors": (None, True),
    "overwrite_output_dir": (None, False, True),
    "enable_jit_checkpoint": _OFF,
    "remove_unused_columns": (None, True, False),
    "label_names": (None,),
    "length_column_name": (None, "length"),
    "prediction_loss_only": (None, False, True),
    "eval_accumulation_steps": (None,),
    "eval_do_concat_batches": (None, True),
    "eval_use_gather_object": _OFF,
    "batch_eval_metrics": _OFF,
    "do_train": (None, False, True),
    "do_eval": (None, False, True),
    "do_predict": _OFF,
    "resume_from_checkpoint": (None,),
    "full_determinism": _OFF,
    "trust_remote_code": _OFF,
    "packing_strategy": (None, "bfd"),
    "dataset_batch_size": (None, 1000),
}

# Keywords whose default is what the MLX trainer does; any other value would change training, so it is refused.
DEFAULT_ONLY_KEYWORDS: Dict[str, Tuple[Any, ...]] = {
    "packing": _OFF,
    "padding_free": _OFF,
    "eval_packing": _OFF,
    "group_by_length": _OFF,
    "dataloader_drop_last": _OFF,
    "data_seed": (None,),
    "neftune_noise_alpha": (None,),
    "label_smoothing_factor": (None, 0, 0.0),
    "completion_only_loss": _OFF,
    "assistant_only_loss": _OFF,
    "loss_type": (None, "nll"),
    "truncation_mode": (None, "keep_start"),
    "shuffle_dataset": _OFF,
    "model_init_kwargs": (None, {}),
    "chat_template_path": (None,),
    "eos_token": (None,),
    "pad_token": (None,),
    "router_aux_loss_coef": (None,),
    "lr_scheduler_kwargs": (None, {}),
    "optim_args": (None,),
    "optim_target_modules": (None,),
    "auto_find_batch_size": _OFF,
    "ignore_data_skip": _OFF,
    "restore_callback_states_from_checkpoint": _OFF,
    "eval_on_start": _OFF,
    "deepspeed": (None,),
    "fsdp": (None, "", []),
    "fsdp_config": (None,),
    "accelerator_config": (None,),
    "parallelism_config": (None,),
}


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
