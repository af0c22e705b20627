"""Build tiny random-weight vision-language model folders that `mlx-vlm` loads offline, with their processors.

Each builder in `BUILDERS` writes a config, safetensors made from mlx-vlm's own model classes, a byte-level BPE
(ERNIE 4.5 VL: a SentencePiece BPE) trained on the shared corpus with each family's special tokens, a chat template
written here, and the image processor's settings, so vision tests never need a model hub.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional

from tools.kits.tiny_vlm_folder import (
    _model,
    _save_weights,
    _write_json,
    _write_tokenizer,
    open_folder,
    pixel_bounded_preprocessor,
    write_model_folder,
)
from tools.kits.tiny_vlm_glm4v import build_tiny_glm4v, build_tiny_glm4v_moe, build_tiny_glm_ocr  # noqa: F401  GLM-4V exports but does not train: no BUILDERS row
from tools.kits.tiny_vlm_muse_glimmer import MUSE_GLIMMER_END_OF_TURN, MUSE_GLIMMER_IMAGE_SIDE, build_tiny_muse_glimmer

# Qwen 2.5 VL's turn and image markers, as its processor and model look them up by text.
QWEN_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|im_end|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA_SPECIAL = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<start_of_image>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<end_of_turn>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# Small enough to train in seconds on two CPU cores: a 56x56 image is 16 patches, merged to 4 image tokens.
QWEN_IMAGE_SIDE = 56
QWEN3_IMAGE_SIDE = 64
GEMMA_IMAGE_SIDE = 32


def qwen25_vl_config(ids: Dict[str, int]) -> dict:
    """Hugging Face's qwen2_5_vl field names, text fields at the top level as the real checkpoints have them."""
    return {
        "model_type": "qwen2_5_vl",
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": ids["__size__"],
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|eos|>"]],
        "pad_token_id": ids["<|pad|>"],
        "torch_dtype": "float32",
        "vision_config": {
            "model_type": "qwen2_5_vl",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "out_hidden_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [1],
            "in_channels": 3,
        },
    }


def build_tiny_qwen25_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512, layers: int = 2) -> Path:
    """A loadable tiny Qwen 2.5 VL in `folder` (created if missing), `layers` language blocks; returns its path."""
    from mlx_vlm.models import qwen2_5_vl

    folder = open_folder(folder)
    ids = _write_tokenizer(folder, vocab_size, QWEN_SPECIAL, QWEN_TEMPLATE)
    config = {**qwen25_vl_config(ids), "num_hidden_layers": layers}
    return write_model_folder(folder, qwen2_5_vl, config, seed, preprocessor=_qwen2_preprocessor())


def _qwen2_preprocessor() -> dict:
    pixels = QWEN_IMAGE_SIDE * QWEN_IMAGE_SIDE
    return {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": pixels, "max_pixels": pixels}


def qwen2_vl_config(ids: Dict[str, int]) -> dict:
    """Qwen 2 VL: Qwen 2.5 VL's text fields, and a vision tower sized by `embed_dim` without windowed attention."""
    config = qwen25_vl_config(ids)
    config.update(model_type="qwen2_vl", architectures=["Qwen2VLForConditionalGeneration"])
    config["vision_config"] = {
        "model_type": "qwen2_vl",
        "depth": 2,
        "embed_dim": 32,
        "hidden_size": 64,
        "num_heads": 2,
        "mlp_ratio": 2,
        "patch_size": 14,
        "spatial_patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
    }
    return config


def build_tiny_qwen2_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Qwen 2 VL in `folder`; returns its path."""
    from mlx_vlm.models import qwen2_vl

    folder = open_folder(folder)
    config = qwen2_vl_config(_write_tokenizer(folder, vocab_size, QWEN_SPECIAL, QWEN_TEMPLATE))
    return write_model_folder(folder, qwen2_vl, config, seed, preprocessor=_qwen2_preprocessor())


def qwen3_vl_config(ids: Dict[str, int]) -> dict:
    """Qwen 3 VL: a nested text config with interleaved multimodal rope, 16-pixel patches and a deepstack layer."""
    return {
        "model_type": "qwen3_vl",
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|eos|>"]],
        "pad_token_id": ids["<|pad|>"],
        "vocab_size": ids["__size__"],
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "qwen3_vl_text",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "vocab_size": ids["__size__"],
            "max_position_embeddings": 1024,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
            "tie_word_embeddings": True,
        },
        "vision_config": {
            "model_type": "qwen3_vl",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "out_hidden_size": 64,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [0],
            "in_channels": 3,
        },
    }


def build_tiny_qwen3_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Qwen 3 VL in `folder`; returns its path."""
    from mlx_vlm.models import qwen3_vl

    return _build_qwen3_family(folder, qwen3_vl, qwen3_vl_config, seed, vocab_size)


def qwen3_5_config(ids: Dict[str, int]) -> dict:
    """Qwen 3.5: Qwen 3 VL's tower under a hybrid text model (gated delta layers, every second one full attention)."""
    config = qwen3_vl_config(ids)
    config.update(model_type="qwen3_5", architectures=["Qwen3_5ForConditionalGeneration"])
    config["vision_config"] = {**config["vision_config"], "model_type": "qwen3_5", "deepstack_visual_indexes": []}
    config["text_config"] = {
        "model_type": "qwen3_5_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "num_hidden_layers": 2,
        "full_attention_interval": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": ids["__size__"],
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "type": "default",
            "mrope_section": [1, 1, 0],
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_interleaved": True,
        },
    }
    return config


def build_tiny_qwen3_5(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Qwen 3.5 (vision) in `folder`; returns its path."""
    from mlx_vlm.models import qwen3_5

    return _build_qwen3_family(folder, qwen3_5, qwen3_5_config, seed, vocab_size)


def qwen3_vl_moe_config(ids: Dict[str, int]) -> dict:
    """Qwen 3 VL MoE: Qwen 3 VL's tower and rope over a language model of four experts, two per token."""
    config = qwen3_vl_config(ids)
    config.update(model_type="qwen3_vl_moe", architectures=["Qwen3VLMoeForConditionalGeneration"])
    config["vision_config"] = {**config["vision_config"], "model_type": "qwen3_vl_moe"}
    config["text_config"] = {
        **config["text_config"],
        "model_type": "qwen3_vl_moe_text",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    }
    return config


def qwen3_5_moe_config(ids: Dict[str, int]) -> dict:
    """Qwen 3.5 MoE: Qwen 3.5's tower and hybrid layers, four experts (two per token) and a gated shared expert."""
    config = qwen3_5_config(ids)
    config.update(model_type="qwen3_5_moe", architectures=["Qwen3_5MoeForConditionalGeneration"])
    config["vision_config"] = {**config["vision_config"], "model_type": "qwen3_5_moe"}
    text = {key: value for key, value in config["text_config"].items() if key != "intermediate_size"}
    config["text_config"] = {
        **text,
        "model_type": "qwen3_5_moe_text",
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "norm_topk_prob": True,
    }
    return config


def _build_qwen3_family(folder: str | Path, module: Any, config_of: Any, seed: int, vocab_size: int) -> Path:
    folder = open_folder(folder)
    config = config_of(_write_tokenizer(folder, vocab_size, QWEN_SPECIAL, QWEN_TEMPLATE))
    pixels = QWEN3_IMAGE_SIDE * QWEN3_IMAGE_SIDE
    preprocessor = pixel_bounded_preprocessor("Qwen2VLImageProcessorFast", "Qwen3VLProcessor", 16, pixels)
    return write_model_folder(folder, module, config, seed, preprocessor=preprocessor)


def build_tiny_qwen3_vl_moe(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Qwen 3 VL MoE in `folder`; returns its path."""
    from mlx_vlm.models import qwen3_vl_moe

    return _build_qwen3_family(folder, qwen3_vl_moe, qwen3_vl_moe_config, seed, vocab_size)


def build_tiny_qwen3_5_moe(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Qwen 3.5 MoE (vision) in `folder`; returns its path."""
    from mlx_vlm.models import qwen3_5_moe

    return _build_qwen3_family(folder, qwen3_5_moe, qwen3_5_moe_config, seed, vocab_size)


def gemma3_config(ids: Dict[str, int]) -> dict:
    """Hugging Face's gemma3 field names: a text config and a SigLIP vision config."""
    tokens_per_image = 4
    return {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "image_token_index": ids["<image_soft_token>"],
        "boi_token_index": ids["<start_of_image>"],
        "eoi_token_index": ids["<end_of_image>"],
        "mm_tokens_per_image": tokens_per_image,
        "eos_token_id": [ids["<end_of_turn>"], ids["<|eos|>"]],
        "pad_token_id": ids["<|pad|>"],
        "vocab_size": ids["__size__"],
        "hidden_size": 64,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "vocab_size": ids["__size__"],
            "sliding_window": 64,
            "sliding_window_pattern": 2,
            "mm_tokens_per_image": tokens_per_image,
            "max_position_embeddings": 1024,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "num_hidden_layers": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "patch_size": 8,
            "image_size": GEMMA_IMAGE_SIDE,
        },
    }


def build_tiny_gemma3(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Gemma 3 (vision) in `folder` (created if missing); returns its path."""
    from mlx_vlm.models import gemma3

    folder = open_folder(folder)
    ids = _write_tokenizer(
        folder,
        vocab_size,
        GEMMA_SPECIAL,
        GEMMA_TEMPLATE,
        bos_token="<|system|>",
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )
    config = gemma3_config(ids)
    preprocessor = {
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor",
        "size": {"height": GEMMA_IMAGE_SIDE, "width": GEMMA_IMAGE_SIDE},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pan_and_scan": False,
    }
    processor = {"processor_class": "Gemma3Processor", "image_seq_length": 4}
    return write_model_folder(folder, gemma3, config, seed, preprocessor=preprocessor, processor=processor)


PIXTRAL_SPECIAL = ["[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
PIXTRAL_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}[INST]"
    "{%- if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}[IMG]{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}[/INST]"
    "{%- else -%}"
    "{%- if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}{{ part['text'] }}{%- endfor %}{%- endif %}{{ eos_token }}"
    "{%- endif -%}{%- endfor -%}"
)
PIXTRAL_IMAGE_SIDE = 32


def _pixtral_config(ids: Dict[str, int], model_type: str, text: Optional[dict] = None) -> dict:
    """A Pixtral-towered config as the Hub writes it for `model_type` (llava for Pixtral, mistral3 for Mistral 3),
    `text` replacing entries of its text config."""
    return {
        "model_type": model_type,
        "architectures": [
            "LlavaForConditionalGeneration" if model_type == "llava" else "Mistral3ForConditionalGeneration"
        ],
        "image_token_index": ids["[IMG]"],
        "vision_feature_layer": -1,
        "vision_feature_select_strategy": "full",
        "projector_hidden_act": "gelu",
        # Mistral 3 merges patches; the Hub's Pixtral (llava) has no merger and names no merge size.
        **({} if model_type == "llava" else {"spatial_merge_size": 2}),
        "vocab_size": ids["__size__"],
        "eos_token_id": ids["<|eos|>"],
        "text_config": {
            "model_type": "mistral",
            "hidden_size": 64,
            "head_dim": 16,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": ids["__size__"],
            "rope_theta": 10000.0,
            "max_position_embeddings": 1024,
            **(text or {}),
        },
        "vision_config": {
            "model_type": "pixtral",
            "num_hidden_layers": 2,
            "hidden_size": 32,
            "head_dim": 16,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "image_size": PIXTRAL_IMAGE_SIDE,
            "patch_size": 8,
            "rope_theta": 10000.0,
            "hidden_act": "silu",  # as the Hub's Pixtral and Mistral 3 checkpoints, and as mlx-vlm always runs it
        },
    }


def _build_pixtral_towered(
    folder: str | Path, model_type: str, module: Any, merge: int, seed: int, vocab: int, text: Optional[dict] = None
) -> Path:
    folder = open_folder(folder)
    ids = _write_tokenizer(folder, vocab, PIXTRAL_SPECIAL, PIXTRAL_TEMPLATE, bos_token="<|system|>")
    config = _pixtral_config(ids, model_type, text)
    _write_json(folder / "config.json", config)
    _write_json(
        folder / "preprocessor_config.json",
        {
            "image_processor_type": "PixtralImageProcessor",
            "processor_class": "PixtralProcessor",
            "patch_size": 8,
            "size": {"longest_edge": PIXTRAL_IMAGE_SIDE},
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
        },
    )
    _write_json(
        folder / "processor_config.json",
        {
            "processor_class": "PixtralProcessor",
            "patch_size": 8,
            "spatial_merge_size": merge,
            "image_token": "[IMG]",
            "image_break_token": "[IMG_BREAK]",
            "image_end_token": "[IMG_END]",
        },
    )
    module_name = module.__name__.rsplit(".", 1)[-1]
    _save_weights(folder, _model(module, {**config, "model_type": module_name}, seed))
    return folder


def build_tiny_pixtral_as_hub(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A tiny Pixtral written as the Hub ships Pixtral: `model_type: llava` with a `pixtral` vision config, and
    weights from mlx-vlm's `pixtral` module (its `llava` module cannot build that tower)."""
    from mlx_vlm.models import pixtral

    return _build_pixtral_towered(folder, "llava", pixtral, 1, seed, vocab_size)


def build_tiny_mistral3(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A tiny Mistral 3 (Pixtral tower, 2x2 patch merger) in `folder`; returns its path."""
    from mlx_vlm.models import mistral3

    return _build_pixtral_towered(folder, "mistral3", mistral3, 2, seed, vocab_size)


# Ministral 3's text model as the Hub ships it: YaRN rope with Llama 4's position-scaled queries, tied embeddings.
MINISTRAL3_TEXT = {
    "model_type": "ministral3",
    "tie_word_embeddings": True,
    "max_position_embeddings": 4096,
    "rope_parameters": {
        "rope_type": "yarn",
        "type": "yarn",
        "rope_theta": 1000000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 1024,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1,
    },
}


def build_tiny_ministral3(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A tiny Ministral 3 (`mistral3` with a `ministral3` text model, as the Ministral-3-*-2512 ids ship) in `folder`."""
    from mlx_vlm.models import mistral3

    return _build_pixtral_towered(folder, "mistral3", mistral3, 2, seed, vocab_size, MINISTRAL3_TEXT)


LLAMA_SPECIAL = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|image|>",
    "<|python_tag|>",
]
LLAMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|image|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|eot_id|>"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
MLLAMA_IMAGE_SIDE = 32


def build_tiny_mllama(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Llama 3.2 Vision (32x32 tiles, one cross-attention layer) in `folder`; returns its path."""
    from mlx_vlm.models import mllama

    folder = open_folder(folder)
    ids = _write_tokenizer(folder, vocab_size, LLAMA_SPECIAL, LLAMA_TEMPLATE, bos_token="<|begin_of_text|>")
    config = {
        "model_type": "mllama",
        "architectures": ["MllamaForConditionalGeneration"],
        "image_token_index": ids["<|image|>"],
        "eos_token_id": [ids["<|eot_id|>"], ids["<|eos|>"]],
        "pad_token_id": ids["<|pad|>"],
        "vocab_size": ids["__size__"],
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "mllama_text_model",
            "vocab_size": ids["__size__"] + 8,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "cross_attention_layers": [1],
            "max_position_embeddings": 1024,
            "rope_theta": 10000.0,
        },
        "vision_config": {
            "model_type": "mllama_vision_model",
            "image_size": MLLAMA_IMAGE_SIDE,
            "patch_size": 8,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_global_layers": 1,
            "num_attention_heads": 2,
            "max_num_tiles": 4,
            "intermediate_layers_indices": [0],
            "vision_output_dim": 64,
        },
    }
    preprocessor = {
        "image_processor_type": "MllamaImageProcessor",
        "processor_class": "MllamaProcessor",
        "size": {"height": MLLAMA_IMAGE_SIDE, "width": MLLAMA_IMAGE_SIDE},
        "max_image_tiles": 4,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_pad": True,
        "do_convert_rgb": True,
    }
    return write_model_folder(folder, mllama, config, seed, preprocessor=preprocessor)


LFM2_SPECIAL = ["<|im_start|>", "<|im_end|>", "<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
LFM2_IMAGE_SIDE = 64


# Idefics 3 / SmolVLM: the image markers its processor writes, each tile's row and column, and the turn end; "\n\n" as
# one token, as in SmolLM's vocabulary, where llama.cpp's libmtmd looks it up before the overview image.
IDEFICS3_SPECIAL = [
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    "<end_of_utterance>",
    *(f"<row_{row}_col_{col}>" for row in (1, 2) for col in (1, 2)),
]
IDEFICS3_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<image>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<end_of_utterance>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}Assistant:{% endif %}"
)
# One tile of 4 x 4 patches of 8 pixels, pixel-shuffled 2 x 2 into 4 tokens; an image is resized to 2 x 2 tiles and a
# global view.
IDEFICS3_TILE = 32


def idefics3_config(ids: Dict[str, int], model_type: str = "idefics3") -> dict:
    """Idefics 3 (or SmolVLM, same layout): a SigLIP tower, pixel shuffle, one linear projection, a Llama."""
    architecture = "SmolVLMForConditionalGeneration" if model_type == "smolvlm" else "Idefics3ForConditionalGeneration"
    return {
        "model_type": model_type,
        "architectures": [architecture],
        "image_token_id": ids["<image>"],
        "scale_factor": 2,
        "vocab_size": ids["__size__"],
        "eos_token_id": ids["<end_of_utterance>"],
        "pad_token_id": ids["<|pad|>"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": ids["__size__"],
            "rope_theta": 10000.0,
            "max_position_embeddings": 1024,
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "model_type": f"{model_type}_vision",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "patch_size": 8,
            "image_size": IDEFICS3_TILE,
            "layer_norm_eps": 1e-5,  # what mlx-vlm's post-layernorm runs, whatever the config says
        },
    }


def build_tiny_idefics3(
    folder: str | Path, *, seed: int = 0, vocab_size: int = 512, model_type: str = "idefics3"
) -> Path:
    """A loadable tiny Idefics 3 (`model_type="smolvlm"`: SmolVLM) in `folder`; returns its path."""
    import importlib

    module = importlib.import_module(f"mlx_vlm.models.{model_type}")
    folder = open_folder(folder)
    special = [*IDEFICS3_SPECIAL, "<video>"] if model_type == "smolvlm" else IDEFICS3_SPECIAL  # SmolVLM 2 reads video
    ids = _write_tokenizer(folder, vocab_size, special, IDEFICS3_TEMPLATE)
    ids["__size__"] = _add_token(folder, "\n\n")
    config = idefics3_config(ids, model_type)
    processor = "SmolVLMProcessor" if model_type == "smolvlm" else "Idefics3Processor"
    preprocessor = {
        "image_processor_type": "SmolVLMImageProcessor" if model_type == "smolvlm" else "Idefics3ImageProcessor",
        "processor_class": processor,
        "do_resize": True,
        "size": {"longest_edge": 2 * IDEFICS3_TILE},
        "max_image_size": {"longest_edge": IDEFICS3_TILE},
        "do_image_splitting": True,
        "resample": 1,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": True,
    }
    settings = {"processor_class": processor, "image_seq_len": 4}
    return write_model_folder(folder, module, config, seed, preprocessor=preprocessor, processor=settings)


def build_tiny_smolvlm(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny SmolVLM in `folder`; returns its path."""
    return build_tiny_idefics3(folder, seed=seed, vocab_size=vocab_size, model_type="smolvlm")


def _add_token(folder: Path, text: str) -> int:
    """One more (not special) token in the saved tokenizer, matched whole before the BPE runs; returns its size."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_tokens([text])
    tokenizer.save_pretrained(str(folder))
    return len(tokenizer)


def build_tiny_lfm2_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny LFM2-VL (a conv + attention text model, a SigLIP 2 tower) in `folder`: one 64x64 image is
    16 patches unshuffled to 4 image tokens, without tiling."""
    from mlx_vlm.models import lfm2_vl

    folder = open_folder(folder)
    template = QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>")
    ids = _write_tokenizer(folder, vocab_size, LFM2_SPECIAL, template)
    config = {
        "model_type": "lfm2_vl",
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "image_token_id": ids["<image>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|pad|>"],
        "vocab_size": ids["__size__"],
        "downsample_factor": 2,
        "encoder_patch_size": 16,
        "do_image_splitting": False,
        "use_thumbnail": False,
        "min_image_tokens": 4,
        "max_image_tokens": 4,
        "max_num_patches": 16,
        "projector_hidden_size": 64,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "lfm2",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": ids["__size__"],
            "max_position_embeddings": 1024,
            "block_auto_adjust_ff_dim": False,
            "block_dim": 64,
            "conv_dim": 64,
            "conv_dim_out": 64,
            "layer_types": ["conv", "full_attention"],
            "num_heads": 4,
            "eos_token_id": ids["<|im_end|>"],
        },
        "vision_config": {
            "model_type": "siglip2_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "patch_size": 16,
            "num_patches": 16,
        },
    }
    settings = {key: config[key] for key in ("downsample_factor", "encoder_patch_size", "do_image_splitting")}
    settings |= {key: config[key] for key in ("use_thumbnail", "min_image_tokens", "max_image_tokens")}
    preprocessor = {
        "image_processor_type": "Lfm2VlImageProcessor",
        "processor_class": "Lfm2VlProcessor",
        "tile_size": 64,
    } | settings
    return write_model_folder(folder, lfm2_vl, config, seed, preprocessor=preprocessor)


PADDLE_SPECIAL = [
    "<|begin_of_sentence|>",
    "<|end_of_sentence|>",
    "<|IMAGE_START|>",
    "<|IMAGE_END|>",
    "<|IMAGE_PLACEHOLDER|>",
    "<|video_pad|>",
]
# PaddleOCR-VL's turns: "User: " with the images before the text, "Assistant: " closed by the end of sentence.
PADDLE_TEMPLATE = (
    "<|begin_of_sentence|>"
    "{%- for message in messages -%}"
    "{%- if message['content'] is string %}{% set parts = [{'type': 'text', 'text': message['content']}] %}"
    "{%- else %}{% set parts = message['content'] %}{%- endif %}"
    "{%- if message['role'] == 'assistant' %}{{ 'Assistant: ' }}"
    "{%- for part in parts %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "<|end_of_sentence|>"
    "{%- else %}{{ 'User: ' if message['role'] == 'user' else '' }}"
    "{%- for part in parts %}{% if part['type'] == 'image' %}<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
    "{%- endif %}{% endfor %}"
    "{%- for part in parts %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{{ '\\n' }}"
    "{%- endif %}{%- endfor -%}"
    "{%- if add_generation_prompt %}Assistant: {% endif %}"
)


def build_tiny_paddleocr_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny PaddleOCR-VL (an ERNIE 4.5 text model, a NaViT tower with 2x2 merging) in `folder`."""
    from mlx_vlm.models import paddleocr_vl

    folder = open_folder(folder)
    ids = _write_tokenizer(
        folder,
        vocab_size,
        PADDLE_SPECIAL,
        PADDLE_TEMPLATE,
        extra_special_tokens={"image_token": "<|IMAGE_PLACEHOLDER|>"},
    )
    config = {
        "model_type": "paddleocr_vl",
        "architectures": ["PaddleOCRVLForConditionalGeneration"],
        # The Hub's remote-code entry its notebook loads through (`auto_model=AutoModelForCausalLM`); the entries
        # naming the config and processor files are left out, as the tiny folder does not carry those files.
        "auto_map": {"AutoModelForCausalLM": "modeling_paddleocr_vl.PaddleOCRVLForConditionalGeneration"},
        "image_token_id": ids["<|IMAGE_PLACEHOLDER|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|IMAGE_START|>"],
        "vision_end_token_id": ids["<|IMAGE_END|>"],
        "eos_token_id": ids["<|end_of_sentence|>"],
        "pad_token_id": ids["<|pad|>"],
        "bos_token_id": ids["<|begin_of_sentence|>"],
        "vocab_size": ids["__size__"],
        # mlx-vlm's projector writes 1024-wide features whatever the config says, so the text model is that wide.
        "hidden_size": 1024,
        "num_hidden_layers": 2,
        "intermediate_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "hidden_act": "silu",
        "use_bias": False,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [16, 24, 24]},
        "torch_dtype": "float32",
        "vision_config": {
            "model_type": "paddleocr_vl",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": QWEN_IMAGE_SIDE,
            "patch_size": 14,
            "spatial_merge_size": 2,
        },
    }
    pixels = QWEN_IMAGE_SIDE * QWEN_IMAGE_SIDE
    preprocessor = {
        "image_processor_type": "PaddleOCRVLImageProcessor",
        "processor_class": "PaddleOCRVLProcessor",
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 1,
        "min_pixels": pixels,
        "max_pixels": pixels,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    return write_model_folder(folder, paddleocr_vl, config, seed, preprocessor=preprocessor)


# ERNIE 4.5 VL's markers: its processor swaps each `<|image@placeholder|>` between the image bounds for one
# `<|IMAGE_PLACEHOLDER|>` per merged patch; its tokenizer is SentencePiece, so they are user-defined pieces there.
ERNIE_SPECIAL = [
    "<|begin_of_sentence|>",
    "<|end_of_sentence|>",
    "<|IMAGE_START|>",
    "<|IMAGE_END|>",
    "<|IMAGE_PLACEHOLDER|>",
    "<|image@placeholder|>",
    "<|VIDEO_START|>",
    "<|VIDEO_END|>",
    "<mask:1>",
    "<mask:7>",
]
ERNIE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ 'User: ' if message['role'] == 'user' else 'Assistant: ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|IMAGE_START|><|image@placeholder|><|IMAGE_END|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|end_of_sentence|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}Assistant: {% endif %}"
)


def _write_sentencepiece(folder: Path, vocab_size: int, special: List[str], template: str) -> Dict[str, int]:
    """A SentencePiece BPE trained on the shared corpus with `special` as whole pieces; each special piece's id."""
    import io

    import sentencepiece as spm

    from tools.kits.tokenizer_kit import read_corpus_texts

    lines = [line for text in read_corpus_texts() for line in text.splitlines() if line.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        user_defined_symbols=special,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    _write_json(
        folder / "tokenizer_config.json",
        {"tokenizer_class": "Ernie4_5_VLTokenizer", "chat_template": template, "model_max_length": 1024},
    )
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return {piece: processor.piece_to_id(piece) for piece in [*special, "</s>", "<unk>"]} | {
        "__size__": processor.get_piece_size()
    }


def build_tiny_ernie4_5_moe_vl(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny ERNIE 4.5 VL: a text model with one dense and one mixture-of-experts layer, a DFN-RoPE tower
    with 2x2 merging and mlx-vlm's own resampler, and a SentencePiece tokenizer."""
    from mlx_vlm.models import ernie4_5_moe_vl

    folder = open_folder(folder)
    ids = _write_sentencepiece(folder, vocab_size, ERNIE_SPECIAL, ERNIE_TEMPLATE)
    config = {
        "model_type": "ernie4_5_moe_vl",
        "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
        # The Hub repo ships its own model code, which the notebook loads with auto_model=AutoModelForCausalLM.
        "auto_map": {
            "AutoModel": "modeling_ernie_45t_vl.Ernie4_5_VLMoeForConditionalGeneration",
            "AutoModelForCausalLM": "modeling_ernie_45t_vl.Ernie4_5_VLMoeForConditionalGeneration",
        },
        "im_patch_id": ids["<|IMAGE_PLACEHOLDER|>"],
        "image_token_id": ids["<|IMAGE_PLACEHOLDER|>"],
        "video_token_id": ids["<|IMAGE_PLACEHOLDER|>"],
        "image_start_token_id": ids["<|IMAGE_START|>"],
        "image_end_token_id": ids["<|IMAGE_END|>"],
        "video_start_token_id": ids["<|VIDEO_START|>"],
        "video_end_token_id": ids["<|VIDEO_END|>"],
        "eos_token_id": [ids["</s>"], ids["<|end_of_sentence|>"]],
        "vocab_size": ids["__size__"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "use_bias": False,
        "tie_word_embeddings": False,
        # Layer 0 dense, layer 1 a mixture of 4 text and 4 vision experts, 2 picked per token.
        "moe_num_experts": [4, 4],
        "moe_layer_start_index": [1, 1],
        "moe_layer_end_index": [1, 1],
        "moe_intermediate_size": [32, 32],
        "moe_k": 2,
        "moe_num_shared_experts": 0,
        "freq_allocation": 4,
        "mrope_section": [2, 2, 4],
        "pixel_hidden_size": 32,
        "spatial_conv_size": 2,
        "temporal_conv_size": 2,
        "torch_dtype": "float32",
        "vision_config": {
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2.0,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "in_channels": 3,
        },
    }
    processor = {"spatial_conv_size": 2, "temporal_conv_size": 2}
    return write_model_folder(folder, ernie4_5_moe_vl, config, seed, processor=processor)


# Gemma 4's token ids in the model-only tiny Gemma 4 (it has no tokenizer: its tests feed ids).
GEMMA4_TOKENS = {"vocab": 300, "image": 290, "boi": 289, "eoi": 291, "audio": 292, "boa": 293, "eoa": 294, "eos": 1}
GEMMA4_SPECIAL = ["<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>", "<|audio>", "<audio|>", "<|audio|>"]
GEMMA4_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|image|>"
    "{%- elif part['type'] == 'audio' %}<|audio|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<turn|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|turn>model\n{% endif %}"
)
GEMMA4_IMAGE_SIDE = 32
# A two-layer Conformer over the 128 mel bins the processor always makes: one audio token per 40 ms, as the real one.
GEMMA4_AUDIO = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "subsampling_conv_channels": [8, 4],
    "conv_kernel_size": 5,
    "attention_chunk_size": 12,
    "attention_context_left": 13,
    "attention_context_right": 0,
    "output_proj_dims": 32,
}


def gemma4_config(tokens: Dict[str, int], audio: bool = False) -> dict:
    """Gemma 4 with 4 soft tokens for a 32x32 image (8-pixel patches pooled 2x2), and a tiny audio tower if asked."""
    vocab = tokens["vocab"]
    return {
        "model_type": "gemma4",
        "architectures": ["Gemma4ForConditionalGeneration"],
        "vocab_size": vocab,
        "image_token_id": tokens["image"],
        "boi_token_id": tokens["boi"],
        "eoi_token_id": tokens["eoi"],
        "audio_token_id": tokens["audio"],
        "boa_token_id": tokens["boa"],
        "eoa_token_id": tokens["eoa"],
        "hidden_size": 64,
        "vision_soft_tokens_per_image": 4,
        "eos_token_id": [tokens["eos"]],
        "text_config": {
            "model_type": "gemma4_text",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "head_dim": 16,
            "global_head_dim": 16,
            "num_key_value_heads": 2,
            "num_kv_shared_layers": 0,
            "vocab_size": vocab,
            "vocab_size_per_layer_input": vocab,
            "hidden_size_per_layer_input": 8,
            "sliding_window": 64,
            "sliding_window_pattern": 2,
            "max_position_embeddings": 1024,
            "use_double_wide_mlp": False,
            # Image tokens attend to each other both ways, so a batch's per-token image types must line up.
            "use_bidirectional_attention": "vision",
        },
        "vision_config": {
            "model_type": "gemma4_vision",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "global_head_dim": 16,
            "patch_size": 8,
            "position_embedding_size": 64,
            "pooling_kernel_size": 2,
            "default_output_length": 4,
        },
        "audio_config": dict(GEMMA4_AUDIO) if audio else None,
    }


def tiny_gemma4_model(seed: int = 0) -> Any:
    """A tiny Gemma 4 (vision) as mlx-vlm's own model object, with no folder and no tokenizer."""
    from mlx_vlm.models import gemma4

    return _model(gemma4, gemma4_config(GEMMA4_TOKENS), seed)


def build_tiny_gemma4(folder: str | Path, *, seed: int = 0, vocab_size: int = 512, audio: bool = False) -> Path:
    """A loadable tiny Gemma 4 (vision; with `audio`, an audio tower too) in `folder`, with mlx-vlm's own Gemma 4
    processor; returns its path."""
    from mlx_vlm.models import gemma4

    folder = open_folder(folder)
    named = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>"}
    named |= {"audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"}
    ids = _write_tokenizer(
        folder, vocab_size, GEMMA4_SPECIAL, GEMMA4_TEMPLATE, bos_token="<|system|>", extra_special_tokens=named
    )
    tokens = {"vocab": ids["__size__"], "eos": ids["<turn|>"]}
    tokens |= {"image": ids["<|image|>"], "boi": ids["<|image>"], "eoi": ids["<image|>"]}
    tokens |= {"audio": ids["<|audio|>"], "boa": ids["<|audio>"], "eoa": ids["<audio|>"]}
    config = gemma4_config(tokens, audio)
    processor = {
        "processor_class": "Gemma4Processor",
        "image_processor": {"patch_size": 8, "max_soft_tokens": 4, "pooling_kernel_size": 2},
    }
    return write_model_folder(folder, gemma4, config, seed, processor=processor)


BUILDERS = {
    "qwen2_5_vl": build_tiny_qwen25_vl,
    "qwen2_vl": build_tiny_qwen2_vl,
    "qwen3_vl": build_tiny_qwen3_vl,
    "qwen3_5": build_tiny_qwen3_5,
    "gemma3": build_tiny_gemma3,
    "gemma4": build_tiny_gemma4,
    "mllama": build_tiny_mllama,
    "lfm2_vl": build_tiny_lfm2_vl,
    "paddleocr_vl": build_tiny_paddleocr_vl,
    "pixtral": build_tiny_pixtral_as_hub,
    "mistral3": build_tiny_mistral3,
    # Mistral 3 as the Ministral 3 ids ship it (a `ministral3` text model); mlx-vlm builds it with `mistral3`.
    "ministral3": build_tiny_ministral3,
    "ernie4_5_moe_vl": build_tiny_ernie4_5_moe_vl,
    "muse_glimmer": build_tiny_muse_glimmer,
}
# The side of the square images each family's tiny processor takes whole, without resizing.
IMAGE_SIDES = {
    "qwen2_5_vl": QWEN_IMAGE_SIDE,
    "qwen2_vl": QWEN_IMAGE_SIDE,
    "qwen3_vl": QWEN3_IMAGE_SIDE,
    "qwen3_5": QWEN3_IMAGE_SIDE,
    "gemma3": GEMMA_IMAGE_SIDE,
    "gemma4": GEMMA4_IMAGE_SIDE,
    "mllama": MLLAMA_IMAGE_SIDE,
    "lfm2_vl": LFM2_IMAGE_SIDE,
    "paddleocr_vl": QWEN_IMAGE_SIDE,
    "pixtral": PIXTRAL_IMAGE_SIDE,
    "mistral3": PIXTRAL_IMAGE_SIDE,
    "ministral3": PIXTRAL_IMAGE_SIDE,
    "ernie4_5_moe_vl": QWEN_IMAGE_SIDE,
    "muse_glimmer": MUSE_GLIMMER_IMAGE_SIDE,
}
# Each family's end-of-turn marker, as its chat template writes it.
END_OF_TURN = {
    "qwen2_5_vl": "<|im_end|>",
    "qwen2_vl": "<|im_end|>",
    "qwen3_vl": "<|im_end|>",
    "qwen3_5": "<|im_end|>",
    "gemma3": "<end_of_turn>",
    "gemma4": "<turn|>",
    "mllama": "<|eot_id|>",
    "lfm2_vl": "<|im_end|>",
    "paddleocr_vl": "<|end_of_sentence|>",
    "pixtral": "<|eos|>",
    "mistral3": "<|eos|>",
    "ministral3": "<|eos|>",
    "ernie4_5_moe_vl": "<|end_of_sentence|>",
    "muse_glimmer": MUSE_GLIMMER_END_OF_TURN,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("family", choices=sorted(BUILDERS))
    parser.add_argument("folder")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    print(BUILDERS[options.family](options.folder, seed=options.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
