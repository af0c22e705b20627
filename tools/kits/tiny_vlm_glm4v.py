"""A tiny GLM-4.1V (mlx-vlm `glm4v`), GLM-4.5V (`glm4v_moe`) and GLM-OCR (`glm_ocr`) that `mlx_vlm.load` reads offline, with mlx-vlm's own
processor.

Its tower takes 8-pixel patches with a learned 6 x 6 position grid, so a 48-pixel square is read without resizing the
grid, and merges them 2 x 2 into 9 image tokens (llama.cpp's fewest for GLM-4V is 8). Its language model rotates
half of each head by GLM's sectioned multimodal rope; GLM-4.5V's has a dense layer, then four experts (two per token,
chosen by sigmoid scores) beside a shared one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from tools.kits.tiny_vlm_folder import _write_tokenizer, open_folder, pixel_bounded_preprocessor, write_model_folder

# The turn and image markers mlx-vlm's processor and llama.cpp's libmtmd look up by text; the box markers are those
# the processor adds when it loads, present here so the vocabulary does not grow past the embedding.
GLM4V_SPECIAL = [
    "<|user|>",
    "<|assistant|>",
    "<|endoftext|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|video|>",
    "<|begin_of_box|>",
    "<|end_of_box|>",
]
GLM4V_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
GLM4V_IMAGE_SIDE = 48
GLM4V_END_OF_TURN = "<|user|>"
_PATCH = 8


def glm4v_config(ids: Dict[str, int]) -> dict:
    """Hugging Face's glm4v field names; the tower's norms take 1e-6, the epsilon mlx-vlm's blocks hard-code."""
    return {
        "model_type": "glm4v",
        "architectures": ["Glm4vForConditionalGeneration"],
        "image_token_id": ids["<|image|>"],
        "video_token_id": ids["<|video|>"],
        "image_start_token_id": ids["<|begin_of_image|>"],
        "image_end_token_id": ids["<|end_of_image|>"],
        "vision_start_token_id": ids["<|begin_of_image|>"],
        "vision_end_token_id": ids["<|end_of_image|>"],
        "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"]],
        "pad_token_id": ids["<|pad|>"],
        "vocab_size": ids["__size__"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "glm4v_text",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": ids["__size__"],
            "max_position_embeddings": 1024,
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 1, 1]},
            "attention_bias": True,
            "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"]],
            "pad_token_id": ids["<|pad|>"],
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "model_type": "glm4v",
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 96,
            "out_hidden_size": 64,
            "num_heads": 2,
            "patch_size": _PATCH,
            "image_size": GLM4V_IMAGE_SIDE,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
        },
    }


def glm4v_moe_config(ids: Dict[str, int]) -> dict:
    """GLM-4.5V: GLM-4.1V's tower under GLM-4.5's experts, its sections rotating halves of the rotated part."""
    config = glm4v_config(ids)
    config.update(model_type="glm4v_moe", architectures=["Glm4vMoeForConditionalGeneration"])
    config["vision_config"] = {**config["vision_config"], "model_type": "glm4v_moe"}
    config["text_config"] = {
        **config["text_config"],
        "model_type": "glm4v_moe_text",
        "head_dim": 16,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "use_qk_norm": False,
    }
    return config


def glm_ocr_config(ids: Dict[str, int]) -> dict:
    """GLM-OCR: a tower without learned positions, with biases and per-head query and key norms; a language model
    rotating whole heads, its multi-token prediction layer left out as mlx-vlm drops it."""
    config = glm4v_config(ids)
    config.update(model_type="glm_ocr", architectures=["GlmOcrForConditionalGeneration"])
    config["vision_config"] = {
        **config["vision_config"],
        "model_type": "glm_ocr_vision",
        "intermediate_size": 64,
        "attention_bias": True,
        "rms_norm_eps": 1e-5,
    }
    text = {
        key: value
        for key, value in config["text_config"].items()
        if key not in ("rope_scaling", "rope_theta", "partial_rotary_factor")
    }
    config["text_config"] = {
        **text,
        "model_type": "glm_ocr_text",
        "head_dim": 16,
        "attention_bias": False,
        "num_nextn_predict_layers": 0,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [2, 3, 3],
            "partial_rotary_factor": 1.0,
            "rope_theta": 10000.0,
        },
    }
    return config


def build_tiny_glm4v(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny GLM-4.1V in `folder`; returns its path."""
    from mlx_vlm.models import glm4v

    return _build(folder, glm4v, glm4v_config, seed, vocab_size)


def build_tiny_glm4v_moe(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny GLM-4.5V in `folder`; returns its path."""
    from mlx_vlm.models import glm4v_moe

    return _build(folder, glm4v_moe, glm4v_moe_config, seed, vocab_size)


def build_tiny_glm_ocr(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny GLM-OCR in `folder`; returns its path."""
    from mlx_vlm.models import glm_ocr

    return _build(folder, glm_ocr, glm_ocr_config, seed, vocab_size)


def _build(folder: str | Path, module: Any, config_of: Any, seed: int, vocab_size: int) -> Path:
    folder = open_folder(folder)
    config = config_of(_write_tokenizer(folder, vocab_size, GLM4V_SPECIAL, GLM4V_TEMPLATE))
    # The processor bounds an image's pixels times its two frames.
    pixels = 2 * GLM4V_IMAGE_SIDE * GLM4V_IMAGE_SIDE
    preprocessor = pixel_bounded_preprocessor("Glm4vImageProcessor", "Glm46VProcessor", _PATCH, pixels)
    return write_model_folder(folder, module, config, seed, preprocessor=preprocessor)
