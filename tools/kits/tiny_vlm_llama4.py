"""A tiny Llama 4 (mlx-vlm `llama4`) that `mlx_vlm.load` reads offline, with mlx-vlm's own processor.

Its language model has four layers, the 4th global without rope, experts (top-1 of four beside a shared one) in every
2nd, Scout's llama3 rope scaling; its vision tower has two blocks over 4 x 4 patches of 14 pixels (mlx-vlm's
processor counts image tokens by 14-pixel patches whatever the config says), pixel-shuffled 2 x 2 into 4 image tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from tools.kits.tiny_vlm_folder import _write_tokenizer, open_folder, write_model_folder

# Llama 4's turn and image markers, as its processor and chat template write them.
LLAMA4_SPECIAL = [
    "<|header_start|>",
    "<|header_end|>",
    "<|eot|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|image|>",
    "<|patch|>",
    "<|tile_x_separator|>",
    "<|tile_y_separator|>",
]
LLAMA4_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|header_start|>{{ message['role'] }}<|header_end|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|image|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|eot|>"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|header_start|>assistant<|header_end|>\n\n{% endif %}"
)
# One tile: 4 x 4 patches of 14 pixels, pixel-shuffled into 4 image tokens.
LLAMA4_IMAGE_SIDE = 56
LLAMA4_END_OF_TURN = "<|eot|>"
_PATCH = 14


def llama4_config(ids: Dict[str, int], vision_layers: int = 2) -> dict:
    """Hugging Face's llama4 field names, each width small."""
    vision_width, projected = 32, 64
    return {
        "model_type": "llama4",
        "architectures": ["Llama4ForConditionalGeneration"],
        "image_token_index": ids["<|patch|>"],
        "boi_token_index": ids["<|image_start|>"],
        "eoi_token_index": ids["<|image_end|>"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "llama4_text",
            "vocab_size": ids["__size__"],
            "hidden_size": 64,
            "intermediate_size": 64,
            "intermediate_size_mlp": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 16.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
            "max_position_embeddings": 1024,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2,
            "attention_chunk_size": 8192,
            "attention_bias": False,
            "use_qk_norm": True,
            "attn_temperature_tuning": True,
            "floor_scale": 8192,
            "attn_scale": 0.1,
            "tie_word_embeddings": False,
            "bos_token_id": ids["<|header_start|>"],
            "eos_token_id": [ids["<|eot|>"], ids["<|eos|>"]],
            "pad_token_id": ids["<|pad|>"],
        },
        "vision_config": {
            "model_type": "llama4_vision_model",
            "hidden_size": vision_width,
            "intermediate_size": 4 * vision_width,  # the pixel shuffle's output feeds the adapter's first layer
            "num_hidden_layers": vision_layers,
            "num_attention_heads": 2,
            "num_channels": 3,
            "image_size": LLAMA4_IMAGE_SIDE,
            "patch_size": _PATCH,
            "norm_eps": 1e-5,
            "hidden_act": "gelu",
            "initializer_range": 0.02,
            "pixel_shuffle_ratio": 0.5,
            "projector_dropout": 0.0,
            "projector_input_dim": projected,
            "projector_output_dim": projected,
            "vision_output_dim": projected,
            "rope_theta": 10000,
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
        },
    }


def build_tiny_llama4(folder: str | Path, *, seed: int = 0, vocab_size: int = 512, vision_layers: int = 2) -> Path:
    """A loadable tiny Llama 4 (vision) in `folder` (created if missing); returns its path. llama.cpp's converter
    names the adapter's second layer only in a tower of `vision_layers` >= 3."""
    from mlx_vlm.models import llama4

    folder = open_folder(folder)
    ids = _write_tokenizer(folder, vocab_size, LLAMA4_SPECIAL, LLAMA4_TEMPLATE, bos_token="<|header_start|>")
    preprocessor = {
        "image_processor_type": "Llama4ImageProcessorFast",
        "processor_class": "Llama4Processor",
        "size": {"height": LLAMA4_IMAGE_SIDE, "width": LLAMA4_IMAGE_SIDE},
        "max_patches": 16,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    processor = {"processor_class": "Llama4Processor"}
    return write_model_folder(
        folder, llama4, llama4_config(ids, vision_layers), seed, preprocessor=preprocessor, processor=processor
    )
