# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Everything a notebook passes to `UnslothTrainer(...)` and `UnslothTrainingArguments(...)`, made into the config.

One module holds the keyword tables (aliases, CUDA-only keywords warned about, keywords held at their default,
trainer keywords refused), the optimizer and schedule names, the reading of a trainer call in either argument
order, and the context length. A call's `args` go from `UnslothTrainer.__init__` to `trainer_arguments` here and
on into the zoo's `MLXTrainingConfig`, and nowhere else. TRL's keywords stay readable as attributes (`args.bf16`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, Dict, List, NamedTuple, Optional, Tuple

from unsloth_zoo.mlx.config import DATASET_ORDERS, MLXTrainingConfig
from unsloth_zoo.mlx.optim import SCHEDULES

from ..models.keywords import MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, carries_value, normalised_name, plain_value

logger = logging.getLogger(__name__)

# Older or TRL spellings of a backend field; when both spellings are given the backend's name wins.
ALIASES: Dict[str, str] = {
    "max_length": "max_seq_length",
    "evaluation_strategy": "eval_strategy",
}

_OFF = (False, None)
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
    # packing=True packs rows (training/packing.py); padding_free alone changes no loss, only TRL's memory layout.
    "packing": (False, None, True),
    "padding_free": (False, None, True),
    "eval_packing": _OFF,
    "group_by_length": _OFF,
    "dataloader_drop_last": _OFF,
    "data_seed": (None,),
    "neftune_noise_alpha": (None,),
    "label_smoothing_factor": (None, 0, 0.0),
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
    "generation_config": (None,),
    "sortish_sampler": _OFF,
}

_ADAMW = (
    "adamw",
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_hf",
    "adamw_apex_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_anyprecision",
    "adamw_8bit",
    "adamw_bnb_8bit",
    "adamw_32bit",
    "adamw_torch_4bit",
    "adamw_torch_8bit",
    "paged_adamw",
    "paged_adamw_8bit",
    "paged_adamw_32bit",
)
_LION = ("lion", "lion_8bit", "lion_32bit", "paged_lion", "paged_lion_8bit", "paged_lion_32bit")

# Each CUDA optimizer name and the MLX optimizer with the same update rule (8-bit and paged states only save memory).
OPTIMIZERS: Dict[str, str] = {
    **{name: "adamw" for name in _ADAMW},
    **{name: "lion" for name in _LION},
    "adam": "adam",
    "sgd": "sgd",
    "adafactor": "adafactor",
}

# Each TRL trainer keyword the MLX trainer cannot honour, and what to do instead; None (or all-None pairs) is unused.
REFUSED_KEYWORDS: Dict[str, str] = {
    "peft_config": "put LoRA on the model with FastLanguageModel.get_peft_model(model, ...) before the trainer",
    "compute_metrics": "the MLX trainer reports eval_loss and eval_perplexity only",
    "compute_loss_func": "the MLX trainer uses its next-token loss (train_on_responses_only masks it)",
    "optimizers": "choose the optimizer with optim= and lr_scheduler_type= in the arguments",
    "optimizer_cls_and_kwargs": "choose the optimizer with optim= in the arguments",
    "preprocess_logits_for_metrics": "the MLX trainer computes no metrics from logits",
    "model_init": "pass the model itself",
    "quantization_config": "load the model with FastLanguageModel.from_pretrained instead",
}
MLX_ORDER = ("tokenizer", "train_dataset", "eval_dataset")
TRL_ORDER = ("args", "data_collator", "train_dataset", "eval_dataset", "processing_class")
OWN_KEYWORDS = frozenset({*MLX_ORDER, *TRL_ORDER, "formatting_func", "callbacks", "processor"})

BACKEND_FIELDS = frozenset(MLXTrainingConfig.__dataclass_fields__)
SAMPLING_STRATEGIES = {"random": None, "sequential": "sequential"}
SAMPLING_KEYWORD = "train_sampling_strategy"
# Keywords the public trainer honours itself, kept as attributes of the arguments (not backend config fields).
TRAINER_KEYWORDS: Dict[str, Any] = {
    "dataset_kwargs": None,
    "embedding_learning_rate": None,
    "preserve_dataset_order": False,
    # Honoured with UnslothVisionDataCollator; the trainer refuses it for text (train_on_responses_only there).
    "completion_only_loss": None,
    # Upstream's flag for an IterableDataset: rows are read in the order they come, as Hugging Face streams them.
    "streaming": False,
    # Seq2SeqTrainingArguments' generation at evaluation; the trainer refuses them for a model that cannot generate.
    "predict_with_generate": False,
    "generation_max_length": None,
    "generation_num_beams": None,
}
# TRL's keywords that are not backend fields, each kept as an attribute with the value given or this default.
KEPT_KEYWORDS: Dict[str, Any] = {
    **{name: quiet[0] for name, quiet in {**INERT_KEYWORDS, **DEFAULT_ONLY_KEYWORDS}.items()},
    **TRAINER_KEYWORDS,
    SAMPLING_KEYWORD: "random",
}
# The keywords that choose an order; a config that got none of them leaves the choice to the trainer.
ORDER_KEYWORDS = ("dataset_order", "preserve_dataset_order", SAMPLING_KEYWORD)
# Carried from one arguments object to the trainer's own copy (rebuilt from the backend fields), unless the
# trainer call itself passes one of the keywords that set it.
CARRIED_ATTRIBUTES = {
    "skip_prepare_dataset": ("dataset_kwargs",),
    "eval_strategy_unset": ("eval_strategy", "evaluation_strategy", "eval_steps"),
    "dataset_order_explicit": ORDER_KEYWORDS,
    **{name: (name,) for name in KEPT_KEYWORDS},
}
KNOWN_KEYWORDS = BACKEND_FIELDS | set(ALIASES) | set(KEPT_KEYWORDS)
# CUDA Unsloth's batch order (torch.randperm seeded with seed + epoch), named as upstream's MLX trainer names it.
TORCH_ORDER = "torch_randperm"
# Where a context length given to the trainer itself came from: kept as given, as TRL keeps its max_length.
TRAINER_SOURCE = "trainer"
SUPPORTED_DATASET_KWARGS = frozenset({"skip_prepare_dataset"})
FALLBACK_MAX_SEQ_LENGTH = 1024


# ---- spellings -------------------------------------------------------------------------------------------------


def mlx_optimizer(value: Any) -> str:
    """The MLX optimizer doing the job of the named CUDA optimizer; ValueError listing the names known here."""
    name = normalised_name(value)
    if name not in OPTIMIZERS:
        raise ValueError(
            f"optim={value!r} has no MLX equivalent; supported optimizers: {', '.join(sorted(OPTIMIZERS))}"
        )
    return OPTIMIZERS[name]


def mlx_schedule(value: Any) -> str:
    """The schedule name the backend knows; ValueError listing them for any other."""
    name = normalised_name(value)
    if name not in SCHEDULES:
        raise ValueError(
            f"lr_scheduler_type={value!r} is not supported on MLX; supported schedules: {', '.join(SCHEDULES)}"
        )
    return name


# ---- UnslothTrainingArguments ------------------------------------------------------------------------------------


class Translation(NamedTuple):
    values: Dict[str, Any]
    ignored: List[str]
    max_seq_length_source: Optional[str]
    skip_prepare_dataset: bool


def _skip_prepare_dataset(requested: Mapping[str, Any]) -> bool:
    """dataset_kwargs' one supported key; every other key is refused, and embedding_learning_rate is checked."""
    dataset_kwargs = dict(requested.get("dataset_kwargs") or {})
    unsupported = sorted(set(dataset_kwargs) - SUPPORTED_DATASET_KWARGS)
    if unsupported:
        raise NotImplementedError(
            f"dataset_kwargs={{{', '.join(repr(key) for key in unsupported)}: ...}} is not supported on MLX; "
            "only skip_prepare_dataset is (pass an already tokenized dataset with input_ids)"
        )
    rate = requested.get("embedding_learning_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0):
        raise ValueError(f"embedding_learning_rate must be a non-negative number, got {rate!r}")
    return bool(dataset_kwargs.get("skip_prepare_dataset", False))


def requested_values(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Keywords, one dict of them, or one path taken as `output_dir` (with or without more keywords)."""
    if not args:
        return dict(kwargs)
    if len(args) > 1:
        raise TypeError(
            "UnslothTrainingArguments takes keywords, one dict, or one output_dir path; got several positionals"
        )
    (first,) = args
    if isinstance(first, Mapping):
        given = dict(first)
    elif isinstance(first, (str, os.PathLike)):
        given = {"output_dir": os.fspath(first)}
    else:
        raise TypeError(
            f"UnslothTrainingArguments takes a dict or an output_dir path positionally, got {type(first).__name__}"
        )
    clashes = sorted(set(given) & set(kwargs))
    if clashes:
        raise TypeError(f"UnslothTrainingArguments got {', '.join(clashes)} both positionally and as keywords")
    return {**given, **kwargs}


def refuse_unsupported(requested: Mapping[str, Any], owner: str = "UnslothTrainingArguments") -> None:
    """NotImplementedError naming every keyword this backend cannot honour; run first, before any conversion."""
    unknown = sorted(set(requested) - KNOWN_KEYWORDS)
    if unknown:
        raise NotImplementedError(
            f"{owner} does not support {', '.join(unknown)} on MLX; remove "
            f"{'it' if len(unknown) == 1 else 'them'}, since nothing the MLX trainer does would honour the request"
        )
    changed = [
        f"{name}={requested[name]!r}"
        for name in sorted(set(requested) & set(DEFAULT_ONLY_KEYWORDS))
        if carries_value(requested[name], DEFAULT_ONLY_KEYWORDS[name])
    ]
    sampling = plain_value(requested.get(SAMPLING_KEYWORD))
    if sampling is not None and sampling not in SAMPLING_STRATEGIES:
        changed.append(f"{SAMPLING_KEYWORD}={requested[SAMPLING_KEYWORD]!r}")
    if changed:
        raise NotImplementedError(
            f"{owner} cannot train with {', '.join(changed)} on MLX; leave "
            f"{'it' if len(changed) == 1 else 'them'} at the default, since the MLX trainer would train differently"
        )


def _resolve_aliases(requested: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """Rename aliases to backend fields (the backend's own name wins); also say where max_seq_length came from."""
    values = dict(requested)
    source = "max_seq_length" if values.get("max_seq_length") is not None else None
    for alias, canonical in ALIASES.items():
        if alias not in values:
            continue
        aliased = values.pop(alias)
        if values.get(canonical) is None:
            values[canonical] = aliased
            if canonical == "max_seq_length" and aliased is not None:
                source = alias
    return values, source


def _warmup(values: Dict[str, Any]) -> None:
    """An explicit positive warmup_steps wins; else warmup_ratio becomes steps against a known max_steps.

    In epoch mode the ratio is left for the backend, which applies it to the real total at train time.
    """
    steps = values.get("warmup_steps")
    ratio = values.get("warmup_ratio") or 0
    if steps is not None and steps > 0:
        return
    if ratio > 0:
        max_steps = values.get("max_steps")
        values["warmup_steps"] = math.ceil(max_steps * ratio) if max_steps is not None and max_steps > 0 else 0


def translate(
    requested: Dict[str, Any], epochs_when_length_unset: Optional[int] = None, owner: str = "UnslothTrainingArguments"
) -> Translation:
    """Backend config values for a notebook's keywords, the CUDA-only ones that asked for something, and where
    max_seq_length came from."""
    refuse_unsupported(requested, owner)
    skip_prepare = _skip_prepare_dataset(requested)
    ignored = [
        name for name in requested if name in INERT_KEYWORDS and carries_value(requested[name], INERT_KEYWORDS[name])
    ]
    sampling = plain_value(requested.get(SAMPLING_KEYWORD))
    values, source = _resolve_aliases(
        {name: value for name, value in requested.items() if name in BACKEND_FIELDS or name in ALIASES}
    )
    if SAMPLING_STRATEGIES.get(sampling) and "dataset_order" not in values:
        values["dataset_order"] = SAMPLING_STRATEGIES[sampling]
    if plain_value(requested.get("preserve_dataset_order")) and "dataset_order" not in values:
        values["dataset_order"] = "sequential"
    epochs = values.get("num_train_epochs")
    if isinstance(epochs, float) and epochs.is_integer():
        values["num_train_epochs"] = int(epochs)
    if epochs_when_length_unset is not None and "max_steps" not in values and "num_train_epochs" not in values:
        values["num_train_epochs"] = epochs_when_length_unset
    if "num_train_epochs" in values and "max_steps" not in values:
        values["max_steps"] = -1
    if "lr_scheduler_type" in values:
        values["lr_scheduler_type"] = mlx_schedule(values["lr_scheduler_type"])
    if "optim" in values:
        values["optim"] = mlx_optimizer(values["optim"])
    if values.get("pad_to_multiple_of") == "auto":
        values["pad_to_multiple_of"] = None
    _warmup(values)
    # Public defaults that differ from the backend's, as CUDA Unsloth's do: the chat template owns the EOS.
    values.setdefault("append_eos", False)
    values.setdefault("grad_clip_mode", "global_norm")
    values.setdefault("max_grad_norm", 1.0)
    # Left open so the trainer can choose: the model's own max_seq_length, then max_length, then 1024.
    values.setdefault("max_seq_length", None)
    return Translation(values, ignored, source, skip_prepare)


def warn_ignored(names: List[str], owner: str = "UnslothTrainingArguments") -> None:
    if names:
        warnings.warn(
            f"{owner}: {', '.join(names)} {'has' if len(names) == 1 else 'have'} no effect on MLX and "
            f"{'is' if len(names) == 1 else 'are'} ignored "
            "(CUDA, mixed-precision, hub and tracker settings do not change the trained weights)",
            RuntimeWarning,
            stacklevel=3,
        )


class UnslothTrainingArguments(MLXTrainingConfig):
    """The MLX config, built from the keywords a CUDA notebook passes to `TrainingArguments` or `SFTConfig`.

    Every keyword TRL's `SFTConfig` takes stays readable as an attribute, as given or at its default.
    """

    # TRL's SFTConfig sets this to 3: the epochs trained when neither max_steps nor num_train_epochs is given.
    epochs_when_length_unset: ClassVar[Optional[int]] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        requested = requested_values(args, kwargs)
        translation = translate(requested, type(self).epochs_when_length_unset, type(self).__name__)
        values = translation.values
        order = values.get("dataset_order", MLXTrainingConfig.dataset_order)
        if order not in (*DATASET_ORDERS, TORCH_ORDER):
            raise ValueError(
                f"dataset_order={order!r} is not an order; choose one of {', '.join(DATASET_ORDERS)}, "
                f"or {TORCH_ORDER} (CUDA Unsloth's, drawn with torch)"
            )
        torch_order = order == TORCH_ORDER
        # The backend knows no torch order; the trainer draws it, so the backend checks the rest with "default".
        super().__init__(**{**values, **({"dataset_order": "default"} if torch_order else {})})
        if torch_order:
            self.dataset_order = TORCH_ORDER
        self.dataset_order_explicit = "dataset_order" in values
        self.max_seq_length_source = translation.max_seq_length_source
        self.skip_prepare_dataset = translation.skip_prepare_dataset
        for name, default in KEPT_KEYWORDS.items():
            setattr(self, name, requested.get(name, default))
        rate = requested.get("embedding_learning_rate")
        self.embedding_learning_rate: Optional[float] = None if rate is None else float(rate)
        warn_ignored(translation.ignored, type(self).__name__)

    # TRL's and older Hugging Face spellings of two backend fields, read and written through to them.
    @property
    def max_length(self) -> Optional[int]:
        return self.max_seq_length

    @max_length.setter
    def max_length(self, value: Optional[int]) -> None:
        self.max_seq_length = value  # type: ignore[assignment]

    @property
    def evaluation_strategy(self) -> str:
        return self.eval_strategy

    @evaluation_strategy.setter
    def evaluation_strategy(self, value: str) -> None:
        self.eval_strategy = value


# ---- the trainer's call and its copy of the arguments ------------------------------------------------------------


class TrainerCall(NamedTuple):
    tokenizer: Any
    config: UnslothTrainingArguments
    train_dataset: Any
    eval_dataset: Any
    data_collator: Any
    formatting_func: Any
    callbacks: Optional[List[Any]]
    # The processor (text and images) when the call has one: processor=, a processor as processing_class, or
    # the vision collator's.
    processor: Any = None
    # What was passed as the tokenizer or processing class (TRL's `trainer.processing_class`).
    processing_class: Any = None


def is_training_arguments(value: Any) -> bool:
    """Our config, a dict of keywords, or a dataclass carrying `output_dir` (Hugging Face's or TRL's arguments)."""
    if isinstance(value, (MLXTrainingConfig, Mapping)):
        return True
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "output_dir")


def looks_like_dataset(value: Any) -> bool:
    """Rows of data (a datasets.Dataset, a list of rows), as opposed to a data collator, which is called."""
    return value is not None and not callable(value) and (hasattr(value, "__len__") or hasattr(value, "__iter__"))


def _positional_names(positionals: Tuple[Any, ...]) -> Tuple[str, ...]:
    """The MLX order `(model, tokenizer, train, eval)` or TRL's `(model, args, collator, train, eval, processing)`:
    training arguments second mean TRL's; a None there is TRL's `args=None` unless a dataset follows it."""
    if not positionals:
        return ()
    second = positionals[0]
    if second is None:
        mlx_order = len(positionals) > 1 and looks_like_dataset(positionals[1])
        order = MLX_ORDER if mlx_order else TRL_ORDER
    else:
        order = TRL_ORDER if is_training_arguments(second) else MLX_ORDER
    if len(positionals) > len(order):
        raise TypeError(
            f"UnslothTrainer takes at most {len(order) + 1} positional arguments in the "
            f"{'TRL' if order is TRL_ORDER else 'MLX'} order (model, {', '.join(order)}); pass the rest by keyword"
        )
    return order[: len(positionals)]


def _unused(value: Any) -> bool:
    """None, or TRL's `optimizers=(None, None)` default."""
    return value is None or (isinstance(value, (tuple, list)) and all(item is None for item in value))


def _refuse_trainer_keywords(keywords: Dict[str, Any]) -> None:
    refused = [name for name in REFUSED_KEYWORDS if name in keywords and not _unused(keywords[name])]
    if refused:
        hints = "; ".join(f"{name}: {REFUSED_KEYWORDS[name]}" for name in refused)
        raise NotImplementedError(f"UnslothTrainer on MLX does not support {', '.join(refused)} ({hints})")


def read_trainer_call(model: Any, positionals: Tuple[Any, ...], keywords: Dict[str, Any]) -> TrainerCall:
    """Sort the call's values by meaning and build the trainer's config; TypeError for a malformed call,
    NotImplementedError for what MLX can't run."""
    named = dict(zip(_positional_names(positionals), positionals))
    clashes = sorted(set(named) & set(keywords))
    if clashes:
        raise TypeError(f"UnslothTrainer got multiple values for {', '.join(clashes)}")
    named.update(keywords)
    unknown = sorted(set(named) - OWN_KEYWORDS - set(REFUSED_KEYWORDS) - KNOWN_KEYWORDS)
    if unknown:
        raise TypeError(f"UnslothTrainer got unexpected keyword argument(s): {', '.join(unknown)}")
    _refuse_trainer_keywords(named)
    if named.get("train_dataset") is None:
        raise ValueError("UnslothTrainer needs a train_dataset")
    given = named.get("tokenizer")
    given = given if given is not None else named.get("processing_class")
    # A vision collator carries its processor, which serves when the call names none (one given explicitly wins).
    from_collator = getattr(named.get("data_collator"), "processor", None)
    given = given if given is not None else from_collator
    processor = named.get("processor")
    if processor is None:
        processor = given if is_processor(given) else from_collator
    # A processor (text and images) holds the text tokenizer at `.tokenizer`; the MLX trainer needs that one.
    tokenizer = given.tokenizer if given is not None and is_processor(given) else given
    if tokenizer is None and processor is not None and is_processor(processor):
        given, tokenizer = processor, processor.tokenizer
    if tokenizer is None:
        raise TypeError("UnslothTrainer needs a tokenizer: pass processing_class= (TRL's name) or tokenizer=")
    overrides = {name: value for name, value in named.items() if name in KNOWN_KEYWORDS}
    return TrainerCall(
        tokenizer=tokenizer,
        config=trainer_arguments(named.get("args"), overrides, model),
        train_dataset=named["train_dataset"],
        eval_dataset=named.get("eval_dataset"),
        data_collator=named.get("data_collator"),
        formatting_func=named.get("formatting_func"),
        callbacks=named.get("callbacks"),
        processor=processor,
        processing_class=given,
    )


def is_processor(value: Any) -> bool:
    """A Hugging Face processor (text and images): it holds its text tokenizer at `.tokenizer`."""
    return getattr(value, "tokenizer", None) is not None


_DEFAULT_INSTANCES: Dict[Tuple[type, Any], Any] = {}


def _default_instance(kind: type, output_dir: Any) -> Any:
    """A foreign arguments class built with nothing but `output_dir`: its values after its own `__post_init__`."""
    if (kind, output_dir) not in _DEFAULT_INSTANCES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _DEFAULT_INSTANCES[kind, output_dir] = kind(output_dir=output_dir)
    return _DEFAULT_INSTANCES[kind, output_dir]


def _field_default(args: Any, field: dataclasses.Field) -> Any:
    """What the class gives this field when nothing is asked, after `__post_init__` fills derived values in."""
    try:
        return getattr(_default_instance(type(args), args.output_dir), field.name)
    except Exception:
        pass
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def foreign_keywords(args: Any) -> Dict[str, Any]:
    """A Hugging Face / TRL arguments object as keywords: every field the backend knows, plus any other field
    whose value differs from what its class gives by default (only those can have been asked for)."""
    keywords = {}
    for field in dataclasses.fields(args):
        if not field.init:
            continue
        value = getattr(args, field.name)
        # Fields the backend shares keep Hugging Face's values, defaults included, so training matches the CUDA run.
        if field.name in BACKEND_FIELDS or field.name in ALIASES or value != _field_default(args, field):
            keywords[field.name] = value
    return keywords


def _rebuilt_config(args: Any, overrides: Dict[str, Any]) -> UnslothTrainingArguments:
    if args is None or isinstance(args, Mapping):
        return UnslothTrainingArguments({**(args or {}), **overrides})
    if isinstance(args, MLXTrainingConfig):
        kind = type(args) if isinstance(args, UnslothTrainingArguments) else UnslothTrainingArguments
        source = getattr(args, "max_seq_length_source", "max_seq_length")
        fields = args.to_dict()
        # A trainer-level alias replaces the config's value rather than losing to it.
        for alias, canonical in ALIASES.items():
            if alias in overrides:
                fields.pop(canonical, None)
        config = kind({**fields, **overrides})
        if "max_seq_length" not in overrides and "max_length" not in overrides:
            config.max_seq_length_source = source if config.max_seq_length is not None else None
        return config
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return UnslothTrainingArguments({**foreign_keywords(args), **overrides})
    return UnslothTrainingArguments({**attribute_keywords(args), **overrides})


def attribute_keywords(args: Any) -> Dict[str, Any]:
    """A plain object (a SimpleNamespace, a class with attributes) as keywords: its public non-callable attributes.
    TypeError when none of them is a training argument, so a tokenizer passed as args is not read as one."""
    keywords = {}
    for name in dir(args):
        if name.startswith("_"):
            continue
        try:
            value = getattr(args, name)
        except Exception:
            continue
        if not callable(value):
            keywords[name] = value
    if isinstance(args, type) or not set(keywords) & KNOWN_KEYWORDS:
        raise TypeError(
            "UnslothTrainer args must be UnslothTrainingArguments, a dict, a TrainingArguments dataclass or an "
            f"object whose attributes are training arguments, got {type(args).__name__}"
        )
    return keywords


def _length(value: Any) -> Optional[int]:
    """A positive whole number of positions, or None (unset, zero, or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


def _max_seq_length(config: UnslothTrainingArguments, model: Any) -> int:
    """CUDA Unsloth's order: a length given to the trainer itself, as given; the args' max_seq_length, never past
    the length the model was loaded for; the model's max_seq_length, then its max_length; the args' max_length;
    else 1024, TRL's default (the model's position count is not consulted, as TRL does not)."""
    source = getattr(config, "max_seq_length_source", "max_seq_length")
    given = _length(config.max_seq_length)
    if source == TRAINER_SOURCE and given is not None:
        return given
    loaded = _length(getattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, None))
    if source == "max_seq_length" and given is not None:
        if loaded is not None and given > loaded:
            logger.warning(
                "max_seq_length=%d is longer than the model's maximum of %d positions; training with %d",
                given,
                loaded,
                loaded,
            )
            return loaded
        return given
    for value in (loaded, _length(getattr(model, "max_length", None)), given if source == "max_length" else None):
        if value is not None:
            return value
    return FALLBACK_MAX_SEQ_LENGTH


def trainer_arguments(args: Any, overrides: Dict[str, Any], model: Any = None) -> UnslothTrainingArguments:
    """The trainer's own `UnslothTrainingArguments`: `args` (ours, a dict, or Hugging Face's / TRL's) with the
    trainer-level keywords on top, the context length settled against the model."""
    config = _rebuilt_config(args, overrides)
    for name, keywords in CARRIED_ATTRIBUTES.items():
        if hasattr(args, name) and not any(keyword in overrides for keyword in keywords):
            setattr(config, name, getattr(args, name))
    if isinstance(args, MLXTrainingConfig) and not isinstance(args, UnslothTrainingArguments):
        # The backend's own config always holds a dataset_order; only another value than its default was asked for.
        config.dataset_order_explicit = any(name in overrides for name in ORDER_KEYWORDS) or (
            args.dataset_order != MLXTrainingConfig.dataset_order
        )
    if any(overrides.get(name) is not None for name in ("max_seq_length", "max_length")):
        config.max_seq_length_source = TRAINER_SOURCE
    config.max_seq_length = _max_seq_length(config, model)
    return config
