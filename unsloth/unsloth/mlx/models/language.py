# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`FastLanguageModel` on MLX: load a local folder or a Hub id through the zoo's loader, quantize it on request
(`load_in_4bit` / `load_in_8bit`), and put LoRA on it (QLoRA on a quantized base).

Upstream's keywords are checked against `keywords`' one table: those that only steer CUDA are accepted with one
warning; those that would load or adapt a different model than MLX can (DoRA, LoftQ, fp8) are refused by name. A folder holding
only a saved adapter loads its base (quantized as it was when trained) with the adapter on top.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Optional, Sequence, Tuple

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.checkpoint import (
    ADAPTER_CONFIG_FILE,
    ADAPTERS_FILE,
    save_model_files,
    source_config,
    trains_adapters_only,
)
from unsloth_zoo.mlx.checkpointing import request_gradient_checkpointing
from unsloth_zoo.mlx.loading import load_model, resolve_model_folder
from unsloth_zoo.mlx.qat import prepare_qat, qat_scheme, restore_activation_quantization, saved_quantization_config
from unsloth_zoo.mlx.lora import (
    DEFAULT_TARGETS,
    FULL_FINETUNING_ATTRIBUTE,
    FULL_TARGETS,
    apply_lora,
    lora_settings,
    trainable_parameter_counts,
)

from .fast_inference import attach_fast_inference, peft_config, save_lora, write_peft_beside
from .merged import model_config, save_pretrained_gguf, save_pretrained_merged
from .main_rank import write_on_main_rank_only
from .keywords import (
    ENTRY_POINT_KEYWORD,
    MODEL_MAX_SEQ_LENGTH_ATTRIBUTE,
    check_load_keywords,
    check_peft_keywords,
    model_context_limit,
    normalised_name,
)
from .methods import attach_methods, rebind_tokenizer
from .speech import refuse_speech_checkpoint
from .quantize import (
    CONVERTED_ADAPTER_ATTRIBUTE,
    Quantization,
    as_quantization,
    convert_qat_model,
    model_quantization,
    qat_scheme_named,
    quantize_model,
    requested_quantization,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_SEQ_LENGTH = 2048
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
BASE_MODEL_ATTRIBUTE = "unsloth_base_model"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model")


def _dtype(value: Any) -> Optional[Any]:
    if value is None:
        return None
    name = normalised_name(value)
    if name not in DTYPES:
        raise ValueError(f"dtype={value!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _dtype_or_torch_dtype(dtype: Any, torch_dtype: Any) -> Any:
    """`torch_dtype` is transformers' older name for `dtype`; given both, they must agree."""
    if torch_dtype is None:
        return dtype
    if dtype is not None and _dtype(dtype) != _dtype(torch_dtype):
        raise ValueError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree; give one of them")
    return torch_dtype


def _clamped_length(model: Any, requested: Optional[int]) -> int:
    limit = model_context_limit(model)
    length = DEFAULT_MAX_SEQ_LENGTH if requested is None else int(requested)
    if limit is not None and length > limit:
        if requested is not None:
            logger.warning(
                "max_seq_length=%d is longer than the model's maximum of %d positions; using %d", length, limit, limit
            )
        length = limit
    return length


def _save_pretrained(model: Any, save_directory: str | Path, tokenizer: Any = None) -> None:
    """Adapters (with their mlx_lm config) for a LoRA model, all weights otherwise."""
    folder = Path(save_directory)
    converted = getattr(model, CONVERTED_ADAPTER_ATTRIBUTE, None)
    if converted is not None:
        # After torchao's convert step the trained adapter is written, as CUDA's peft model still holds it.
        settings, adapter = converted
        folder.mkdir(parents=True, exist_ok=True)
        mx.save_safetensors(str(folder / ADAPTERS_FILE), adapter)
        (folder / ADAPTER_CONFIG_FILE).write_text(
            json.dumps(settings.adapter_config(), indent=2) + "\n", encoding="utf-8"
        )
        if tokenizer is not None:
            tokenizer.save_pretrained(str(folder))
        return
    quantization = model_quantization(model)
    if quantization is None or lora_settings(model) is not None:
        save_model_files(folder, model, tokenizer)
        settings = lora_settings(model)
        # CUDA Unsloth's save_pretrained writes PEFT's files; whole trained modules have no PEFT LoRA form here.
        if settings is not None and not settings.modules_to_save and trains_adapters_only(model):
            write_peft_beside(model, folder, peft_config(model))
        return
    _save_whole(model, folder, tokenizer)


def _save_whole(model: Any, folder: Path, tokenizer: Any) -> None:
    """A quantized model saved whole, its config saying how, so mlx_lm quantizes the skeleton to match."""
    quantization = model_quantization(model)
    if quantization is None:
        raise ValueError("a whole-model save here is for a quantized model; this one has no quantization")
    folder.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    config = {**model_config(model), **saved_quantization_config(model, quantization.as_dict())}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def save_pretrained_torchao(
    model: Any,
    save_directory: str | Path,
    tokenizer: Any = None,
    torchao_config: Any = None,
    push_to_hub: bool = False,
    token: Any = None,
) -> None:
    """A model trained with `qat_scheme`, converted (if the notebook's `quantize_` cell did not already) and saved
    whole in MLX's quantized format, which mlx_lm loads; torchao's own formats need torch and are not written."""
    if torchao_config is not None or push_to_hub:
        raise NotImplementedError(
            "save_pretrained_torchao on MLX saves a model trained with get_peft_model(qat_scheme=...) locally, in "
            "MLX's quantized format; for post-training quantization use save_pretrained_merged(save_method="
            "'merged_4bit'), and push_to_hub_merged to upload"
        )
    if qat_scheme(model) is not None:
        convert_qat_model(model)
    if model_quantization(model) is None or lora_settings(model) is not None:
        raise ValueError(
            "save_pretrained_torchao: this model was not trained with get_peft_model(qat_scheme=...), so there is no "
            "quantization to save; pass qat_scheme when adding LoRA, or use save_pretrained_merged"
        )
    _save_whole(model, Path(save_directory), tokenizer)
    print(f"Unsloth: saved the quantization-aware trained model in MLX's quantized format to {save_directory}")


def _adapter_config(folder: Path) -> Optional[Dict[str, Any]]:
    """The adapter config of a folder that holds a saved adapter and no model of its own."""
    path = folder / ADAPTER_CONFIG_FILE
    if not path.is_file() or (folder / "config.json").is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _with_adapter(model: Any, folder: Path, adapter: Dict[str, Any]) -> Any:
    """LoRA as the adapter config describes it, then the saved adapter weights on top."""
    parameters = adapter["lora_parameters"]
    apply_lora(
        model,
        rank=parameters["rank"],
        alpha=parameters["scale"] * parameters["rank"],
        dropout=parameters.get("dropout", 0.0),
        target_modules=tuple(parameters["keys"]) + tuple(adapter.get("modules_to_save", ())),
        num_layers=adapter.get("num_layers"),
        base_model=adapter.get("base_model_name_or_path"),
        quantization=adapter.get("quantization"),
    )
    model.load_weights(str(folder / ADAPTERS_FILE), strict=False)
    mx.eval(model.parameters())
    model.print_trainable_parameters = MethodType(print_trainable_parameters, model)
    return model


def print_trainable_parameters(model: Any) -> None:
    """PEFT's one line: LoRA weights plus fully trained embed_tokens / lm_head, against every weight."""
    trainable, total = trainable_parameter_counts(model)
    share = 100 * trainable / total if total else 0.0
    print(f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {share:.4f}")


def _peft_targets(target_modules: Any, modules_to_save: Any) -> Tuple[Tuple[str, ...], bool]:
    """The names to adapt, and whether each must match (the user named them) or the default list applies."""
    saved = [] if modules_to_save is None else modules_to_save
    extra = (saved,) if isinstance(saved, str) else tuple(saved)
    odd = [name for name in extra if name not in FULL_TARGETS]
    if odd:
        raise NotImplementedError(
            f"modules_to_save={odd!r}: MLX trains in full only {', '.join(FULL_TARGETS)}; "
            "name other modules in target_modules for LoRA"
        )
    if target_modules is None or target_modules == "all-linear":
        return DEFAULT_TARGETS + extra, False
    names = (target_modules,) if isinstance(target_modules, str) else tuple(target_modules)
    return names + extra, True


def _saved_tokenizer(folder: Path) -> Any:
    """The tokenizer saved beside an adapter (its chat template included), or None when none was saved there."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    # Loaded as mlx_lm loads a model's tokenizer, then unwrapped like the one from_pretrained returns.
    wrapper = load_tokenizer(folder)
    return getattr(wrapper, "_tokenizer", wrapper)


def load_quantization(
    load_in_4bit: Any, load_in_8bit: Any, full_finetuning: Any, load_in_fp8: Any = False
) -> Optional[Quantization]:
    """The quantization a load asks for; NotImplementedError when it also asks to train every (quantized) weight."""
    quantization = requested_quantization(load_in_4bit, load_in_8bit, load_in_fp8)
    if quantization is not None and full_finetuning:
        raise NotImplementedError(
            f"full_finetuning=True with {quantization.load_flag}=True: quantized weights cannot be trained on MLX; "
            "load the model unquantized for a full fine-tune, or train LoRA adapters on the quantized base"
        )
    return quantization


def adapter_base(
    folder: Any, adapter: Dict[str, Any], quantization: Optional[Quantization]
) -> Tuple[str, Dict[str, bool]]:
    """The base a saved adapter names, and the load flags for it (the adapter's own quantization unless the call
    asks for one)."""
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{folder} holds an adapter without base_model_name_or_path; load its base instead")
    if quantization is None and adapter.get("quantization"):
        quantization = as_quantization(adapter["quantization"])
    return str(base), {} if quantization is None else {quantization.load_flag: True}


class FastLanguageModel:
    @staticmethod
    def from_pretrained(
        model_name: str | Path,
        max_seq_length: Optional[int] = None,
        dtype: Any = None,
        load_in_4bit: bool = False,
        full_finetuning: bool = False,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        """The model (a local folder or a Hub id) and its Hugging Face tokenizer.

        `load_in_4bit=True` / `load_in_8bit=True` quantize the base (group size 64), `load_in_fp8=True` to MLX's
        mxfp8 (group size 32); `full_finetuning` needs no
        switch here, since a model that never gets LoRA trains every weight, but a quantized base cannot be.
        """
        dtype = _dtype_or_torch_dtype(dtype, kwargs.pop("torch_dtype", None))
        owner = kwargs.pop(ENTRY_POINT_KEYWORD, "FastLanguageModel.from_pretrained")
        check_load_keywords(owner, kwargs)
        quantization = load_quantization(
            load_in_4bit, kwargs.get("load_in_8bit"), full_finetuning, kwargs.get("load_in_fp8")
        )
        if kwargs.get("qat_scheme") is not None and not full_finetuning:
            raise ValueError(
                f"Specifying `qat_scheme` in `{owner}(...)` is only compatible with `full_finetuning=True`. If you "
                "wish to use QAT with LoRA, please pass in `qat_scheme` in `get_peft_model(...)` instead."
            )
        token, revision = kwargs.get("token"), kwargs.get("revision")
        folder = resolve_model_folder(model_name, token=token, revision=revision)
        adapter = _adapter_config(folder)
        if adapter is not None:
            base, flags = adapter_base(folder, adapter, quantization)
            model, tokenizer = FastLanguageModel.from_pretrained(base, max_seq_length, dtype, token=token, **flags)
            saved = _saved_tokenizer(folder)
            if saved is not None:
                rebind_tokenizer(model, saved)
                write_on_main_rank_only(saved)
            model = request_gradient_checkpointing(_with_adapter(model, folder, adapter), kwargs)
            return model, saved if saved is not None else tokenizer
        refuse_speech_checkpoint(owner, folder)
        # Past the model's positions, RoPE is extended (linear scaling, as CUDA Unsloth does) instead of clamped.
        model, wrapper = load_model(folder, max_seq_length=max_seq_length)
        # A model saved after int8-int4 QAT quantizes each token's activations, which mlx_lm's loader does not restore.
        restore_activation_quantization(model, source_config(model) or {})
        chosen = _dtype(dtype)
        if chosen is not None:
            model.set_dtype(chosen)
        if quantization is not None:
            quantize_model(model, quantization)
        setattr(model, BASE_MODEL_ATTRIBUTE, str(model_name))
        setattr(model, FULL_FINETUNING_ATTRIBUTE, bool(full_finetuning))
        setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, _clamped_length(model, max_seq_length))
        model.save_pretrained = MethodType(_save_pretrained, model)
        model.save_pretrained_gguf = MethodType(save_pretrained_gguf, model)
        model.save_pretrained_merged = MethodType(save_pretrained_merged, model)
        # CUDA Unsloth gives every model save_lora, with or without vLLM (GRPO notebooks call it after fast_inference=False).
        model.save_lora = MethodType(save_lora, model)
        if kwargs.get("qat_scheme") is not None:
            # The phone-deployment notebook's full fine-tune: every weight trains fake-quantized.
            prepare_qat(model, qat_scheme_named(kwargs["qat_scheme"], str(model_config(model).get("model_type", ""))))
            model.save_pretrained_torchao = MethodType(save_pretrained_torchao, model)
        # mlx_lm wraps the tokenizer for streaming decode; notebooks call the Hugging Face tokenizer inside directly.
        tokenizer = getattr(wrapper, "_tokenizer", wrapper)
        attach_methods(model, tokenizer, str(folder))
        if kwargs.get("fast_inference"):
            # vLLM's calls (fast_generate, save_lora, load_lora), served by mlx_lm's batched sampling.
            attach_fast_inference(model, tokenizer)
        # Under mlx.launch every rank runs the save cells; rank 0 writes, as under torchrun with HF's main process.
        write_on_main_rank_only(model)
        write_on_main_rank_only(tokenizer)
        return request_gradient_checkpointing(model, kwargs), tokenizer

    @staticmethod
    def get_peft_model(
        model: Any,
        r: int = 16,
        target_modules: Optional[Sequence[str] | str] = None,
        lora_alpha: float = 16,
        lora_dropout: float = 0.0,
        random_state: int = 3407,
        use_rslora: bool = False,
        max_seq_length: Optional[int] = None,
        **kwargs: Any,
    ) -> Any:
        """LoRA on the model in place (the model is returned, as CUDA notebooks reassign it)."""
        check_peft_keywords(kwargs.pop(ENTRY_POINT_KEYWORD, "FastLanguageModel.get_peft_model"), kwargs)
        if getattr(model, FULL_FINETUNING_ATTRIBUTE, False):
            # CUDA Unsloth's answer too: a full-finetuning load trains every weight, so no LoRA goes on top.
            print("Unsloth: Full finetuning is enabled, so .get_peft_model has no effect")
            return request_gradient_checkpointing(model, kwargs)
        targets, strict = _peft_targets(target_modules, kwargs.get("modules_to_save"))
        scheme = None
        if kwargs.get("qat_scheme") is not None:
            scheme = qat_scheme_named(kwargs["qat_scheme"], str(model_config(model).get("model_type", "")))
        base_quantization = model_quantization(model)
        if scheme is not None and base_quantization is not None:
            raise NotImplementedError(
                f"qat_scheme={scheme.name!r} with a {base_quantization.load_flag}=True base: quantization-"
                "aware training fake-quantizes float weights; load the model with load_in_4bit=False"
            )
        # rsLoRA scales by alpha / sqrt(r) instead of alpha / r; the backend divides by r, so alpha carries sqrt(r).
        alpha = lora_alpha * math.sqrt(r) if use_rslora else lora_alpha
        mx.random.seed(int(random_state))
        quantization = model_quantization(model)
        apply_lora(
            model,
            rank=r,
            alpha=alpha,
            dropout=lora_dropout,
            target_modules=targets,
            base_model=getattr(model, BASE_MODEL_ATTRIBUTE, None),
            quantization=None if quantization is None else quantization.as_dict(),
            strict=strict,
        )
        model.print_trainable_parameters = MethodType(print_trainable_parameters, model)
        if scheme is not None:
            prepare_qat(model, scheme)
            model.save_pretrained_torchao = MethodType(save_pretrained_torchao, model)
        if max_seq_length is not None:
            setattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE, _clamped_length(model, max_seq_length))
        return request_gradient_checkpointing(model, kwargs)

    @staticmethod
    def for_inference(model: Any) -> Any:
        model.eval()
        return model

    @staticmethod
    def for_training(model: Any, use_gradient_checkpointing: Any = True) -> Any:
        model.train()
        return model
