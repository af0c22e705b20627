# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Sesame CSM on MLX: a transformers `CsmForConditionalGeneration` folder loaded into mlx-audio's `SesameModel`
(backbone and depth decoder) and mlx-audio's `Mimi` (the codec), the one module that imports them, with LoRA under
transformers' names and PEFT's adapter.

mlx-audio's Sesame attention rotates interleaved pairs (the original checkpoint's layout); transformers' folder is laid
out for rotate-half, so each layer gets mlx-audio's Llama attention, and Mimi's transformer is built with
`rope_traditional=False`, which read those weights as they are. Mimi stays frozen, outside the trained parameters,
as transformers runs it under `no_grad`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import mlx.core as mx
import numpy as np

from .saving import lora_tensors, write_peft_adapter

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
    """transformers' CSM tensors under mlx-audio's names; the codec's are left out (`MimiCodec` reads them)."""
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


def _mimi_config(codec: Any) -> Any:
    from mlx_audio.codec.models.mimi.mimi import MimiConfig
    from mlx_audio.codec.models.mimi.modules import SeanetConfig, TransformerConfig

    seanet = SeanetConfig(
        dimension=codec.hidden_size,
        channels=codec.audio_channels,
        causal=codec.use_causal_conv,
        nfilters=codec.num_filters,
        nresidual_layers=codec.num_residual_layers,
        ratios=list(codec.upsampling_ratios),
        ksize=codec.kernel_size,
        residual_ksize=codec.residual_kernel_size,
        last_ksize=codec.last_kernel_size,
        dilation_base=codec.dilation_growth_rate,
        pad_mode=codec.pad_mode,
        true_skip=not codec.use_conv_shortcut,
        compress=codec.compress,
    )
    transformer = TransformerConfig(
        d_model=codec.hidden_size,
        num_heads=codec.num_attention_heads,
        num_layers=codec.num_hidden_layers,
        causal=True,
        norm_first=True,
        bias_ff=False,
        bias_attn=codec.attention_bias,
        layer_scale=codec.layer_scale_initial_scale,
        positional_embedding="rope",
        use_conv_block=False,
        cross_attention=False,
        conv_kernel_size=3,
        use_conv_bias=True,
        gating=False,
        norm="layer_norm",
        context=codec.sliding_window,
        max_period=int(_rope(codec)[0]),
        max_seq_len=codec.max_position_embeddings,
        kv_repeat=codec.num_attention_heads // codec.num_key_value_heads,
        dim_feedforward=codec.intermediate_size,
        conv_layout=True,
        # transformers' Mimi rotates halves, as its q_proj / k_proj are laid out.
        rope_traditional=False,
    )
    return MimiConfig(
        channels=codec.audio_channels,
        sample_rate=codec.sampling_rate,
        frame_rate=codec.frame_rate,
        renormalize=True,
        seanet=seanet,
        transformer=transformer,
        quantizer_nq=codec.num_quantizers,
        quantizer_bins=codec.codebook_size,
        quantizer_dim=codec.codebook_dim,
    )


def _conv_names(config: Any) -> Dict[str, str]:
    """transformers' convolution prefixes -> mlx-audio's (the SEANet's ELUs hold no weights but take an index)."""
    residuals, ratios = config.num_residual_layers, len(config.upsampling_ratios)
    names = {
        "encoder.layers.0.conv.": "encoder.init_conv1d.conv.conv.",
        "decoder.layers.0.conv.": "decoder.init_conv1d.conv.conv.",
        "downsample.conv.": "downsample.conv.conv.conv.",
        "upsample.conv.": "upsample.convtr.convtr.convtr.",
    }
    for index in range(ratios):
        start = 1 + index * (residuals + 2)
        for residual in range(residuals):
            for stack, at in (("encoder", start + residual), ("decoder", start + 2 + residual)):
                for hf, own in (("1", "0"), ("3", "1")):
                    names[f"{stack}.layers.{at}.block.{hf}.conv."] = (
                        f"{stack}.layers.{index}.residuals.{residual}.block.{own}.conv.conv."
                    )
        names[f"encoder.layers.{start + residuals + 1}.conv."] = f"encoder.layers.{index}.downsample.conv.conv."
        names[f"decoder.layers.{start + 1}.conv."] = f"decoder.layers.{index}.upsample.convtr.convtr."
    last = 1 + ratios * (residuals + 2) + 1
    names[f"encoder.layers.{last}.conv."] = "encoder.final_conv1d.conv.conv."
    names[f"decoder.layers.{last}.conv."] = "decoder.final_conv1d.conv.conv."
    return names


# transformers' Mimi names -> mlx-audio's, inside a transformer layer.
TRANSFORMER_RENAMES = (
    ("_transformer.layers.", "_transformer.transformer.layers."),
    (".input_layernorm.", ".norm1."),
    (".post_attention_layernorm.", ".norm2."),
    (".self_attn_layer_scale.", ".layer_scale_1."),
    (".mlp_layer_scale.", ".layer_scale_2."),
    (".mlp.fc1.", ".gating.linear1."),
    (".mlp.fc2.", ".gating.linear2."),
    (".self_attn.o_proj.", ".self_attn.out_proj."),
)
# ... and inside the quantizer (the first of its split RVQs holds the semantic codebook).
QUANTIZER_RENAMES = (
    ("quantizer.semantic_residual_vector_quantizer.", "quantizer.rvq_first."),
    ("quantizer.acoustic_residual_vector_quantizer.", "quantizer.rvq_rest."),
    (".layers.", ".vq.layers."),
    (".embed_sum", ".embedding_sum"),
)


def _mimi_name(name: str, convolutions: Dict[str, str]) -> str:
    for prefix, own in convolutions.items():
        if name.startswith(prefix):
            return own + name[len(prefix) :]
    for old, new in QUANTIZER_RENAMES if name.startswith("quantizer.") else TRANSFORMER_RENAMES:
        name = name.replace(old, new, 1)
    return name


def mimi_weights(weights: Dict[str, mx.array], codec: Any) -> List[Tuple[str, mx.array]]:
    """The folder's `codec_model.*` tensors as mlx-audio's Mimi names and layouts (convolutions channels-last)."""
    convolutions, mapped = _conv_names(codec), []
    attention: Dict[str, Dict[str, mx.array]] = {}
    for full, value in weights.items():
        if not full.startswith(CODEC_PREFIX):
            continue
        name = _mimi_name(full[len(CODEC_PREFIX) :], convolutions)
        if ".convtr." in name and name.endswith(".weight"):
            value = value.transpose(0, 2, 1) if value.shape[1] == 1 else value.transpose(1, 2, 0)
        elif value.ndim == 3:
            value = value.swapaxes(1, 2)
        for part in ("q_proj", "k_proj", "v_proj"):
            if f".self_attn.{part}." in name:
                attention.setdefault(name.split(f".{part}.")[0], {})[part] = value
                break
        else:
            mapped.append((name, value))
    for owner, parts in attention.items():
        mapped.append((f"{owner}.in_proj.weight", mx.concatenate([parts[p] for p in ("q_proj", "k_proj", "v_proj")])))
    return mapped


class MimiCodec:
    """mlx-audio's Mimi with the folder's weights, frozen and kept outside the trained model's parameters."""

    def __init__(self, config: Any, weights: Dict[str, mx.array]) -> None:
        from mlx_audio.codec.models.mimi.mimi import Mimi
        from mlx_audio.codec.models.mimi.modules import ConvTranspose1d, EuclideanCodebook

        self.mimi = Mimi(_mimi_config(config))
        self.mimi.load_weights(mimi_weights(weights, config), strict=True)

        def settle(module: Any, name: str, _: Any) -> bool:
            # Both derive their working tensors (codebook, transposed kernel) from the loaded ones.
            if isinstance(module, EuclideanCodebook) and name == "initialized":
                module.update_in_place()
            if isinstance(module, ConvTranspose1d) and name == "weight":
                module.update_in_place()
            return True

        self.mimi.filter_and_map(settle)
        mx.eval(self.mimi.parameters())
        self.hop = round(config.sampling_rate / config.frame_rate)

    def encode(self, clip: np.ndarray) -> np.ndarray:
        """A mono clip's codes, (frames, codebooks)."""
        codes = self.mimi.encode(mx.array(np.asarray(clip, dtype=np.float32)).reshape(1, 1, -1))
        return np.array(codes[0]).T

    def frames(self, samples: int) -> int:
        """How many frames of a clip are its own, as transformers' `get_audio_codes_mask` counts them."""
        return -(-samples // self.hop)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """(frames, codebooks) codes back to mono audio."""
        return np.array(self.mimi.decode(mx.array(np.asarray(codes).T[None].astype(np.int32))))[0, 0]


def load_csm(folder: str | Path, dtype: Any = None) -> Tuple[Any, Any]:
    """mlx-audio's Sesame model with the folder's weights, mlx-audio's Mimi beside it, and the `CsmProcessor`."""
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
    if not weights:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights")
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
    model.codec_model = MimiCodec(config.codec_config, weights)
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(folder))
    except OSError:
        model.generation_config = GenerationConfig.from_model_config(config)
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
    """PEFT's names and layouts for CSM's adapted linears, in both decoders."""
    adapted = ((path, getattr(owner, name)) for path, owner, name in _linears(model))
    return lora_tensors(PEFT_PREFIX, ((path, layer) for path, layer in adapted if "lora_a" in layer))


def save_csm_adapter(model: Any, save_directory: str | Path, processor: Any = None, **_: Any) -> None:
    """`model.save_pretrained(folder)` on a CSM with LoRA: PEFT's adapter files for transformers' CSM."""
    settings = getattr(model, LORA_SETTINGS_ATTRIBUTE, None)
    tensors = peft_tensors(model) if settings is not None else {}
    write_peft_adapter(save_directory, tensors, settings, getattr(model, SOURCE_ATTRIBUTE, None), "CSM", processor)
