# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""vLLM's calls on a vision model without vLLM: `model.fast_generate`, `model.save_lora` and `model.load_lora`.

A prompt is a string, `{"prompt": text}` or vLLM's `{"prompt": text, "multi_modal_data": {"image": image or
list}}`; its text and images go through the processor as the GRPO rollout encodes them (no special tokens added:
the chat template wrote them), and each of the `n` samples is decoded by mlx-vlm on its own. As on a text model,
`lora_request=None` samples with the adapter off and a `load_lora` handle with that adapter swapped in, and the answer
has vLLM's shape. `save_lora` writes PEFT's layout, each adapted module named by its full path in the model.
"""

from __future__ import annotations

from pathlib import Path
from types import MethodType
from typing import Any, Dict, List, Optional, Tuple

import mlx.core as mx
import numpy as np

from ..models.batched_sampling import Sampled, cut_at_stop, eos_token_ids
from ..models.fast_inference import (
    CompletionOutput,
    LoRARequest,
    RequestOutput,
    SamplingParams,
    adapter_swapped,
    adapters_off,
    load_lora,
    write_peft_adapter,
)
from .backend import generate_tokens, process_conversation
from .lora import vision_lora_settings

# The kinds of vLLM's `multi_modal_data` a vision model takes here.
MEDIA_KINDS = ("image",)


def vision_peft_config(model: Any) -> Dict[str, Any]:
    """The `adapter_config.json` PEFT reads for a vision model's LoRA adapter."""
    settings = vision_lora_settings(model)
    if settings is None:
        raise ValueError("save_lora needs a LoRA model: call FastVisionModel.get_peft_model(model, ...) first")
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": settings.base_model,
        "r": settings.rank,
        "lora_alpha": settings.alpha,
        "lora_dropout": settings.dropout,
        "bias": "none",
        # Full paths: a last name alone (`q_proj`) would also reach the vision tower's layers of that name.
        "target_modules": list(settings.paths),
        "inference_mode": True,
    }


def save_vision_lora(model: Any, save_directory: str | Path) -> Path:
    """PEFT's `adapter_model.safetensors` and `adapter_config.json` for the vision model's LoRA adapter."""
    return write_peft_adapter(model, save_directory, vision_peft_config(model))


def _images(prompt: Dict[str, Any]) -> List[Any]:
    media = prompt.get("multi_modal_data") or {}
    other = sorted(set(media) - set(MEDIA_KINDS))
    if other:
        raise NotImplementedError(
            f"fast_generate on MLX takes images in multi_modal_data, not {', '.join(other)}: mlx-vlm decodes images"
        )
    images = media.get("image")
    if images is None:
        return []
    return list(images) if isinstance(images, (list, tuple)) else [images]


def encode_prompt(processor: Any, prompt: Any) -> Tuple[Optional[str], List[int], Dict[str, Any]]:
    """(text, ids, image features) of one vLLM prompt, through the processor."""
    if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
        if prompt.get("multi_modal_data"):
            raise NotImplementedError(
                "fast_generate on MLX cannot pair prompt_token_ids with multi_modal_data: the processor must expand "
                "each image's placeholder, so pass the prompt as text"
            )
        return prompt.get("prompt"), list(prompt["prompt_token_ids"]), {}
    if isinstance(prompt, str):
        text, images = prompt, []
    elif isinstance(prompt, dict) and "prompt" in prompt:
        text, images = prompt["prompt"], _images(prompt)
    else:
        raise TypeError(
            "fast_generate takes strings, {'prompt': ..., 'multi_modal_data': {'image': ...}} or "
            f"{{'prompt_token_ids': [...]}} prompts, got {type(prompt).__name__}"
        )
    output = process_conversation(processor, text, images)
    ids = list(output.pop("input_ids"))
    return text, ids, {name: mx.array(np.asarray(value)) for name, value in output.items()}


def _mlx_vlm_sampling(params: SamplingParams) -> Dict[str, Any]:
    """The fields mlx-vlm's decoding reads, each only when it asks for something (vLLM's "off" values left out)."""
    sampling = params.sampling(16)
    chosen: Dict[str, Any] = {"temperature": sampling.temperature}
    if 0.0 < sampling.top_p < 1.0:
        chosen["top_p"] = sampling.top_p
    if sampling.top_k > 0:
        chosen["top_k"] = sampling.top_k
    if sampling.min_p > 0:
        chosen["min_p"] = sampling.min_p
    if sampling.repetition_penalty not in (None, 1.0):
        chosen["repetition_penalty"] = sampling.repetition_penalty
    return chosen


def _sample_one(
    model: Any, tokenizer: Any, ids: List[int], features: Dict[str, Any], params: SamplingParams, eos: List[int]
) -> Sampled:
    """One completion: it ends at an end-of-sequence id (kept in the ids), a stop string, or `max_tokens`."""
    extras = dict(features)
    pixels = extras.pop("pixel_values", None)
    stops = [stop for stop in params.stops() if stop]
    row = Sampled()
    steps = generate_tokens(
        model, mx.array([ids]), pixels, None, extras, int(params.max_tokens or 16), _mlx_vlm_sampling(params)
    )
    for token in steps:
        row.token_ids.append(token)
        if token in eos:
            row.finish_reason, row.stop_reason = "stop", token
            break
        cut = cut_at_stop(tokenizer.decode(row.token_ids), stops, params.include_stop_str_in_output) if stops else None
        if cut is not None:
            row.text, row.stop_reason, row.finish_reason = cut[0], cut[1], "stop"
            return row
    row.text = tokenizer.decode(row.token_ids, skip_special_tokens=params.skip_special_tokens)
    return row


def vision_fast_generate(
    model: Any,
    processor: Any,
    prompts: Any,
    sampling_params: Optional[SamplingParams] = None,
    lora_request: Optional[LoRARequest] = None,
    use_tqdm: bool = False,
    **_: Any,
) -> List[RequestOutput]:
    """vLLM's `LLM.generate` on the vision model: every prompt with its images, `n` samples each."""
    params = sampling_params if sampling_params is not None else SamplingParams()
    if isinstance(params, (list, tuple)):
        raise NotImplementedError("fast_generate on MLX takes one SamplingParams for all prompts")
    if lora_request is not None and not isinstance(lora_request, LoRARequest):
        raise TypeError(f"lora_request must come from model.load_lora(path), got {type(lora_request).__name__}")
    if lora_request is not None and vision_lora_settings(model) is None:
        raise ValueError("lora_request needs a LoRA model: call FastVisionModel.get_peft_model(model, ...) first")
    batch = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
    encoded = [encode_prompt(processor, prompt) for prompt in batch]
    tokenizer = getattr(processor, "tokenizer", processor)
    eos = eos_token_ids(tokenizer, params.stop_token_ids or ())
    if params.seed is not None:
        mx.random.seed(int(params.seed))
    adapter = adapters_off(model) if lora_request is None else adapter_swapped(model, lora_request.weights)
    was_training = getattr(model, "training", False)
    model.eval()
    outputs = []
    try:
        with adapter:
            for index, (text, ids, features) in enumerate(encoded):
                rows = [_sample_one(model, tokenizer, ids, features, params, eos) for _ in range(params.n)]
                completions = [
                    CompletionOutput(number, row.text, row.token_ids, row.finish_reason, row.stop_reason)
                    for number, row in enumerate(rows)
                ]
                outputs.append(RequestOutput(str(index), text, ids, completions))
    finally:
        if was_training:
            model.train()
    return outputs


def attach_vision_save_lora(model: Any) -> None:
    """`model.save_lora`, which CUDA Unsloth gives every LoRA model with or without vLLM."""
    model.save_lora = MethodType(save_vision_lora, model)


def attach_vision_fast_inference(model: Any, processor: Any) -> None:
    """Give the vision model vLLM's calls the vision GRPO notebooks make (`fast_inference=True`)."""

    def model_fast_generate(self: Any, prompts: Any, sampling_params: Any = None, lora_request: Any = None, **kw: Any):
        return vision_fast_generate(self, processor, prompts, sampling_params, lora_request, **kw)

    model.fast_generate = MethodType(model_fast_generate, model)
    model.load_lora = MethodType(load_lora, model)
    attach_vision_save_lora(model)
