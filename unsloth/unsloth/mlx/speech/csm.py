# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Sesame CSM on MLX: a transformers `CsmForConditionalGeneration` folder loaded into mlx-audio's `SesameModel`
(backbone and depth decoder), the one module that imports it, with LoRA under transformers' names and PEFT's adapter.

mlx-audio's Sesame attention rotates interleaved pairs (the original checkpoint's layout); transformers' folder is laid
out for rotate-half, so each layer gets mlx-audio's Llama attention, which reads those weights as they are. The Mimi
codec stays transformers' own `MimiModel` on CPU torch: it only encodes the training clips and decodes generated codes,
frozen, as transformers runs it under `no_grad`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import MethodType
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import mlx.core as mx

CSM_MARK = "_unsloth_csm"
LORA_SETTINGS_ATTRIBUTE = "_unsloth_csm_lora"
SOURCE_ATTRIBUTE = "_unsloth_csm_source"
CSM_AUTO_MODELS = ("CsmForConditionalGeneration",)
ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_NAMES = ("gate_proj", "up_proj", "down_proj")
# mlx-audio's stacks -> transformers' module paths.
HF_STACKS = {"backbone": "backbone_model", "decoder": "depth_decoder.model"}
# transformers' tensor names -> mlx-audio's, for the tensors outside the layers.
HF_TENSORS = {
    "embed_text_tokens.weight": "text_embeddings.weight",
    "backbone_model.embed_tokens.embed_audio_tokens.weight": "audio_embeddings.weight",
    "depth_decoder.model.embed_tokens.weight": "audio_embeddings.weight",
    "lm_head.weight": "codebook0_head.weight",
    "depth_decoder.model.inputs_embeds_projector.weight": "projection.weight",
    "depth_decoder.codebooks_head.weight": "audio_head",
}
PEFT_PREFIX = "base_model.model."
CODEC_PREFIX = "codec_model."


def is_csm(model: Any) -> bool:
    return bool(getattr(model, CSM_MARK, False))


def is_csm_folder(folder: str | Path) -> bool:
    path = Path(folder) / "config.json"
    return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("model_type") == "csm"


def _rope(config: Any) -> Tuple[float, Optional[Dict[str, Any]]]:
    parameters = dict(getattr(config, "rope_parameters", None) or {})
    theta = float(parameters.pop("rope_theta", getattr(config, "rope_theta", 10000.0)))
    return theta, None if parameters.get("rope_type", "default") == "default" else parameters


def _stack_config(config: Any) -> Dict[str, Any]:
    theta, scaling = _rope(config)
    keys = (
        "attention_bias",
        "attention_dropout",
        "head_dim",
        "hidden_act",
        "hidden_size",
        "initializer_range",
        "intermediate_size",
        "max_position_embeddings",
        "mlp_bias",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "rms_norm_eps",
        "use_cache",
        "vocab_size",
    )
    return {**{key: getattr(config, key) for key in keys}, "rope_theta": theta, "rope_scaling": scaling or {}}


def _sesame_config(config: Any) -> Dict[str, Any]:
    depth = config.depth_decoder_config
    return {
        **_stack_config(config),
        "model_type": "csm",
        "backbone_flavor": None,
        "decoder_flavor": None,
        "text_vocab_size": config.text_vocab_size,
        "audio_vocab_size": config.vocab_size,
        "audio_num_codebooks": config.num_codebooks,
        "depth_decoder_config": {
            **_stack_config(depth),
            "model_type": depth.model_type,
            "backbone_hidden_size": depth.backbone_hidden_size,
            "num_codebooks": depth.num_codebooks,
        },
    }


def _with_rotate_half_attention(stack: Any, config: Any) -> None:
    from mlx_audio.lm.models.llama import Attention, ModelArgs

    theta, scaling = _rope(config)
    args = ModelArgs(
        model_type="llama",
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        intermediate_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        rms_norm_eps=config.rms_norm_eps,
        vocab_size=config.vocab_size,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        num_key_value_heads=config.num_key_value_heads,
        attention_bias=config.attention_bias,
        rope_theta=theta,
        rope_scaling=scaling,
    )
    for layer in stack.layers:
        layer.self_attn = Attention(args)


def mlx_weights(weights: Dict[str, mx.array]) -> Dict[str, mx.array]:
    """transformers' CSM tensors under mlx-audio's names; the codec's are left out (it runs in torch)."""
    mapped = {}
    for name, value in weights.items():
        if name.startswith(CODEC_PREFIX):
            continue
        if name in HF_TENSORS:
            mapped[HF_TENSORS[name]] = value
            continue
        for own, hf in HF_STACKS.items():
            if name.startswith(hf + "."):
                mapped[own + name[len(hf) :]] = value
                break
        else:
            raise ValueError(f"{name} is not a tensor of transformers' CsmForConditionalGeneration")
    return mapped


def _codec(folder: Path) -> Any:
    """transformers' Mimi with the folder's codec weights, on CPU torch, in eval mode.

    Loaded through transformers' whole CSM, whose loader knows the folder's tensor names, then kept alone."""
    from transformers import CsmForConditionalGeneration

    return CsmForConditionalGeneration.from_pretrained(str(folder)).codec_model.eval()


def load_csm(folder: str | Path, dtype: Any = None) -> Tuple[Any, Any]:
    """mlx-audio's Sesame model with the folder's weights, transformers' Mimi beside it, and the `CsmProcessor`."""
    try:
        from mlx_audio.tts.models.sesame.sesame import SesameModel
    except ImportError as error:
        raise ImportError(
            f"Sesame CSM on MLX runs mlx-audio's model, which did not import ({error}); "
            "install it with `pip install --no-deps mlx-audio==0.6.2`"
        ) from error
    from transformers import AutoProcessor, CsmConfig, GenerationConfig

    folder = Path(folder)
    config = CsmConfig.from_pretrained(str(folder))
    if not config.tie_codebooks_embeddings:
        raise NotImplementedError(
            "this CSM's depth decoder has codebook embeddings of its own (tie_codebooks_embeddings=False); "
            "mlx-audio's Sesame model shares the backbone's, as every published CSM does"
        )
    weights: Dict[str, mx.array] = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(mx.load(str(path)))
    mapped = mlx_weights(weights)
    chosen = dtype or mapped["text_embeddings.weight"].dtype
    model = SesameModel(_sesame_config(config))
    _with_rotate_half_attention(model.backbone, config)
    _with_rotate_half_attention(model.decoder, config.depth_decoder_config)
    model.load_weights([(name, value.astype(chosen)) for name, value in mapped.items()], strict=True)
    mx.eval(model.parameters())
    setattr(model, CSM_MARK, True)
    setattr(model, SOURCE_ATTRIBUTE, str(folder))
    model.config = config
    model.codec_model = _codec(folder)
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(folder))
    except OSError:
        model.generation_config = GenerationConfig.from_model_config(config)
    model.save_pretrained = MethodType(save_csm_adapter, model)
    return model, AutoProcessor.from_pretrained(str(folder))


def _linears(model: Any) -> Iterator[Tuple[str, Any, str]]:
    """(transformers' module path, owner, attribute) of every linear LoRA may wrap, backbone then depth decoder."""
    for own, hf in HF_STACKS.items():
        for index, layer in enumerate(getattr(model, own).layers):
            for name in ATTENTION_NAMES:
                yield f"{hf}.layers.{index}.self_attn.{name}", layer.self_attn, name
            for name in MLP_NAMES:
                yield f"{hf}.layers.{index}.mlp.{name}", layer.mlp, name


def csm_targets(target_modules: Sequence[str] | str | None) -> List[str]:
    known = ATTENTION_NAMES + MLP_NAMES
    if target_modules is None:
        return list(known)
    names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(
            f"target_modules {', '.join(unknown)} name no linear of CSM's backbone or depth decoder; its adaptable "
            f"names are {', '.join(known)}"
        )
    return names


def peft_target_pattern(targets: Sequence[str]) -> str:
    """PEFT's regex for the adapted linears: the names alone would also reach the Mimi codec's attention in torch."""
    stacks = "|".join(hf.replace(".", r"\.") for hf in HF_STACKS.values())
    return rf"^({stacks})\.layers\.\d+\.(self_attn|mlp)\.({'|'.join(targets)})$"


def apply_csm_lora(
    model: Any, targets: Sequence[str], r: int, alpha: float, dropout: float, seed: int, rslora: bool
) -> Any:
    """Freeze the model and wrap each targeted linear of both decoders with mlx-lm's LoRALinear (B starts at zero)."""
    from mlx_lm.tuner.lora import LoRALinear

    model.freeze()
    mx.random.seed(int(seed))
    scale = alpha / math.sqrt(r) if rslora else alpha / r
    for _, owner, name in _linears(model):
        if name in targets:
            setattr(owner, name, LoRALinear.from_base(getattr(owner, name), r=r, dropout=dropout, scale=scale))
    settings = {"r": r, "lora_alpha": alpha, "lora_dropout": dropout, "target_modules": peft_target_pattern(targets)}
    setattr(model, LORA_SETTINGS_ATTRIBUTE, {**settings, "use_rslora": rslora})
    return model


def peft_tensors(model: Any) -> Dict[str, mx.array]:
    """PEFT's names and layouts: lora_A (rank, in) and lora_B (out, rank), the transposes of mlx-lm's."""
    tensors = {}
    for path, owner, name in _linears(model):
        layer = getattr(owner, name)
        if "lora_a" in layer:
            tensors[f"{PEFT_PREFIX}{path}.lora_A.weight"] = mx.contiguous(layer.lora_a.T)
            tensors[f"{PEFT_PREFIX}{path}.lora_B.weight"] = mx.contiguous(layer.lora_b.T)
    return tensors


def save_csm_adapter(model: Any, save_directory: str | Path, **_: Any) -> None:
    """`model.save_pretrained(folder)` on a CSM with LoRA: PEFT's adapter files for transformers' CSM."""
    settings = getattr(model, LORA_SETTINGS_ATTRIBUTE, None)
    if settings is None:
        raise NotImplementedError(
            "model.save_pretrained on a CSM without LoRA: saving CSM's full weights is not built on MLX yet; "
            "call FastModel.get_peft_model(model, ...) first to train and save an adapter"
        )
    folder = Path(save_directory)
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "adapter_model.safetensors"), peft_tensors(model), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": getattr(model, SOURCE_ATTRIBUTE, None),
        "bias": "none",
        "inference_mode": True,
        **settings,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
