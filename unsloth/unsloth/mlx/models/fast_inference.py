# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""vLLM's calls without vLLM: `SamplingParams`, `model.fast_generate`, `model.save_lora` and `model.load_lora`.

`fast_generate` samples every prompt in one mlx_lm continuous batch and answers in vLLM's shape
(`outputs[0].outputs[0].text`). As in the notebooks, `lora_request=None` samples the base model with the adapter
off, and a handle from `load_lora` samples with that saved adapter swapped in for the call. `save_lora` writes
PEFT's layout, so the notebooks' `safetensors.safe_open(..., framework="pt")` cell reads it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Iterator, List, Optional

import mlx.core as mx
from mlx.utils import tree_flatten

from unsloth_zoo.mlx.lora import lora_settings

from .batched_sampling import Sampling, sample_batch
from .methods import TOKENIZER_ATTRIBUTE

PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_CONFIG_FILE = "adapter_config.json"
_PEFT_PREFIX = "base_model.model."
# mlx_lm's LoRA names and PEFT's, with PEFT storing each matrix transposed.
_MLX_TO_PEFT = {"lora_a": "lora_A.weight", "lora_b": "lora_B.weight"}


@dataclass
class SamplingParams:
    """vLLM's `SamplingParams` fields that sampling on MLX honours, with vLLM's defaults (`top_k=-1`: off)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Any] = None
    stop_token_ids: Optional[List[int]] = None
    include_stop_str_in_output: bool = False
    max_tokens: Optional[int] = 16
    repetition_penalty: float = 1.0
    skip_special_tokens: bool = True
    logprobs: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams n must be a positive integer, got {self.n!r}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams temperature must be >= 0, got {self.temperature!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"SamplingParams max_tokens must be at least 1, got {self.max_tokens!r}")
        unsupported = [
            f"{name}={getattr(self, name)!r}"
            for name, quiet in (("logprobs", None), ("presence_penalty", 0.0), ("frequency_penalty", 0.0))
            if getattr(self, name) != quiet
        ]
        if self.ignore_eos:
            unsupported.append("ignore_eos=True")
        if unsupported:
            raise NotImplementedError(f"SamplingParams on MLX cannot honour {', '.join(unsupported)}")

    def stops(self) -> tuple:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def sampling(self, default_max_tokens: int) -> Sampling:
        """mlx_lm's terms for these fields: vLLM's `top_k=-1` (or 0) and `top_p=1.0` are mlx_lm's "off"."""
        return Sampling(
            max_tokens=int(self.max_tokens or default_max_tokens),
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            top_k=max(int(self.top_k), 0),
            min_p=float(self.min_p or 0.0),
            repetition_penalty=float(self.repetition_penalty),
            seed=self.seed,
            stop=self.stops(),
            include_stop_str_in_output=bool(self.include_stop_str_in_output),
            stop_token_ids=tuple(self.stop_token_ids or ()),
        )

    def clone(self) -> "SamplingParams":
        return SamplingParams(**{item.name: getattr(self, item.name) for item in fields(self)})


@dataclass
class LoRARequest:
    """vLLM's adapter handle; `model.load_lora(path)` returns one holding the adapter's arrays."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    weights: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    finish_reason: Optional[str]
    stop_reason: Any = None
    cumulative_logprob: Optional[float] = None
    logprobs: Any = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True


# ---- the adapter: off, swapped, saved, loaded ----------------------------------------------------------------


def _lora_layers(model: Any) -> List[Any]:
    return [module for _, module in model.named_modules() if hasattr(module, "lora_a") and hasattr(module, "scale")]


@contextlib.contextmanager
def adapters_off(model: Any) -> Iterator[Any]:
    """The model with every LoRA update scaled to zero for the block: the base model's outputs, bit for bit."""
    layers = _lora_layers(model)
    scales = [layer.scale for layer in layers]
    try:
        for layer in layers:
            layer.scale = 0.0
        yield model
    finally:
        for layer, scale in zip(layers, scales):
            layer.scale = scale


def _adapter_arrays(model: Any) -> Dict[str, Any]:
    return {name: array for name, array in tree_flatten(model.parameters()) if name.rsplit(".", 1)[-1] in _MLX_TO_PEFT}


@contextlib.contextmanager
def adapter_swapped(model: Any, weights: Dict[str, Any]) -> Iterator[Any]:
    """The model with a saved adapter's arrays in place of its own for the block (mlx arrays are immutable)."""
    current = _adapter_arrays(model)
    missing = sorted(set(current) - set(weights))
    if missing:
        raise ValueError(f"the LoRA request's adapter does not fit this model: it lacks {missing[0]}")
    try:
        model.load_weights(list(weights.items()), strict=False)
        yield model
    finally:
        model.load_weights(list(current.items()), strict=False)


def peft_name(mlx_name: str) -> str:
    """`model.layers.0.self_attn.q_proj.lora_a` as PEFT writes it."""
    module, kind = mlx_name.rsplit(".", 1)
    return f"{_PEFT_PREFIX}{module}.{_MLX_TO_PEFT[kind]}"


def mlx_name(peft: str) -> str:
    for kind, suffix in _MLX_TO_PEFT.items():
        if peft.startswith(_PEFT_PREFIX) and peft.endswith("." + suffix):
            return f"{peft[len(_PEFT_PREFIX) : -len(suffix) - 1]}.{kind}"
    raise ValueError(f"{peft!r} is not a PEFT LoRA weight name")


def write_peft_adapter(model: Any, save_directory: str | Path, config: Dict[str, Any]) -> Path:
    """The model's LoRA arrays as PEFT's `adapter_model.safetensors`, and `config` as its `adapter_config.json`."""
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {peft_name(name): mx.contiguous(array.T) for name, array in _adapter_arrays(model).items()}
    mx.save_safetensors(str(folder / PEFT_WEIGHTS_FILE), tensors, metadata={"format": "pt"})
    (folder / PEFT_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return folder


def write_peft_beside(model: Any, save_directory: str | Path, config: Dict[str, Any]) -> None:
    """PEFT's `adapter_model.safetensors` beside a folder's mlx adapter, and PEFT's keys added to its adapter config
    (the mlx keys kept), so PEFT, and the notebooks that open that file after `save_pretrained`, read the folder."""
    folder = Path(save_directory)
    tensors = {peft_name(name): mx.contiguous(array.T) for name, array in _adapter_arrays(model).items()}
    mx.save_safetensors(str(folder / PEFT_WEIGHTS_FILE), tensors, metadata={"format": "pt"})
    path = folder / PEFT_CONFIG_FILE
    written = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    path.write_text(json.dumps({**config, **written}, indent=2) + "\n", encoding="utf-8")


def peft_config(model: Any) -> Dict[str, Any]:
    """The `adapter_config.json` PEFT reads for a text model's LoRA adapter."""
    settings = lora_settings(model)
    if settings is None:
        raise ValueError("save_lora needs a LoRA model: call FastLanguageModel.get_peft_model(model, ...) first")
    layers = len(model.layers)
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": settings.base_model,
        "r": settings.rank,
        "lora_alpha": settings.alpha,
        "lora_dropout": settings.dropout,
        "bias": "none",
        "target_modules": sorted({key.rsplit(".", 1)[-1] for key in settings.keys}),
        "layers_to_transform": list(range(layers - settings.num_layers, layers)),
        "inference_mode": True,
    }


def save_lora(model: Any, save_directory: str | Path) -> Path:
    """PEFT's `adapter_model.safetensors` and `adapter_config.json` for the model's LoRA adapter."""
    return write_peft_adapter(model, save_directory, peft_config(model))


def load_lora(model: Any, lora_path: str | Path, load_tensors: bool = True) -> LoRARequest:
    """A handle on the adapter saved at `lora_path` (PEFT's layout), for `fast_generate(..., lora_request=...)`."""
    folder = Path(lora_path)
    weights_file = folder / PEFT_WEIGHTS_FILE
    if not weights_file.is_file():
        raise FileNotFoundError(f"load_lora: {folder} holds no {PEFT_WEIGHTS_FILE} (write one with model.save_lora)")
    weights = {mlx_name(name): mx.contiguous(array.T) for name, array in mx.load(str(weights_file)).items()}
    load_lora.count = getattr(load_lora, "count", 0) + 1  # type: ignore[attr-defined]
    return LoRARequest(folder.name, load_lora.count, str(folder), weights)  # type: ignore[attr-defined]


# ---- fast_generate -------------------------------------------------------------------------------------------


def _prompt_ids(tokenizer: Any, prompt: Any) -> tuple:
    """(text, ids): a string is tokenized as vLLM does (special tokens added); ids pass through."""
    if isinstance(prompt, str):
        return prompt, list(tokenizer(prompt)["input_ids"])
    if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
        return prompt.get("prompt"), list(prompt["prompt_token_ids"])
    if isinstance(prompt, dict) and "prompt" in prompt:
        return _prompt_ids(tokenizer, prompt["prompt"])
    raise TypeError(
        f"fast_generate takes strings or {{'prompt_token_ids': [...]}} prompts, got {type(prompt).__name__}"
    )


def fast_generate(
    model: Any,
    tokenizer: Any,
    prompts: Any,
    sampling_params: Optional[SamplingParams] = None,
    lora_request: Optional[LoRARequest] = None,
    use_tqdm: bool = False,
    **_: Any,
) -> List[RequestOutput]:
    """vLLM's `LLM.generate` on the MLX model: every prompt, `n` samples each, in one batch."""
    params = sampling_params if sampling_params is not None else SamplingParams()
    if isinstance(params, (list, tuple)):
        raise NotImplementedError("fast_generate on MLX takes one SamplingParams for all prompts")
    batch = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
    if lora_request is not None and not isinstance(lora_request, LoRARequest):
        raise TypeError(f"lora_request must come from model.load_lora(path), got {type(lora_request).__name__}")
    if lora_request is not None and lora_settings(model) is None:
        raise ValueError("lora_request needs a LoRA model: call FastLanguageModel.get_peft_model(model, ...) first")
    encoded = [_prompt_ids(tokenizer, prompt) for prompt in batch]
    rows = [ids for _, ids in encoded for _ in range(params.n)]
    adapter = adapters_off(model) if lora_request is None else adapter_swapped(model, lora_request.weights)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with adapter:
            sampled = sample_batch(model, tokenizer, rows, params.sampling(16))
    finally:
        if was_training:
            model.train()
    outputs = []
    for index, (text, ids) in enumerate(encoded):
        mine = sampled[index * params.n : (index + 1) * params.n]
        completions = [
            CompletionOutput(number, row.text, row.token_ids, row.finish_reason, row.stop_reason)
            for number, row in enumerate(mine)
        ]
        outputs.append(RequestOutput(str(index), text, ids, completions))
    return outputs


def attach_fast_inference(model: Any, tokenizer: Any) -> None:
    """Give the model vLLM's three calls the notebooks make (`fast_inference=True`)."""

    def model_fast_generate(self: Any, prompts: Any, sampling_params: Any = None, lora_request: Any = None, **kw: Any):
        # The tokenizer bound last (get_chat_template may rebind it), as model.generate reads it.
        current = getattr(self, TOKENIZER_ATTRIBUTE, None) or tokenizer
        return fast_generate(self, current, prompts, sampling_params, lora_request, **kw)

    model.fast_generate = MethodType(model_fast_generate, model)
    model.save_lora = MethodType(save_lora, model)
    model.load_lora = MethodType(load_lora, model)
