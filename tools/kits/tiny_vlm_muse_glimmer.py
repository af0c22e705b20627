"""A tiny Muse Glimmer (mlx-vlm `muse_glimmer`) that `mlx_vlm.load` reads offline, with mlx-vlm's own processor.

Its text model has one sliding-window layer (with rope) before one full-attention layer (without), as the real
one alternates them; the window is shorter than a training row, so the windowed mask is exercised. Its vision
tower attends within 2x2-patch windows in the first block and across the whole image in the second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

# ATEM turn markers as the notebooks' response parts spell them, and the image markers mlx-vlm's processor
# looks up by text: each `<|patch|>` the template writes becomes the image's bounds around one per image token.
MUSE_GLIMMER_SPECIAL = [
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|eom|>",
    "<|patch|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|video|>",
]
MUSE_GLIMMER_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|start|>{{ message['role'] }}{{ ' to=user' if message['role'] == 'assistant' else '' }}<|message|>"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<|patch|>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|end|>"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|start|>assistant to=user<|message|>{% endif %}"
)
# A 56x56 image is 4x4 patches of 14 pixels, merged 2x2 into 4 image tokens.
MUSE_GLIMMER_IMAGE_SIDE = 56
MUSE_GLIMMER_END_OF_TURN = "<|end|>"


def muse_glimmer_config(ids: Dict[str, int]) -> dict:
    """Hugging Face's muse_glimmer field names, each width small; the tower's merged output is `out_hidden_size`."""
    vision_width, merge = 32, 2
    return {
        "model_type": "muse_glimmer",
        "architectures": ["MuseGlimmerForConditionalGeneration"],
        "image_token_id": ids["<|patch|>"],
        "video_token_id": ids["<|video|>"],
        "out_hidden_size": vision_width * merge * merge,
        "projector_hidden_size": 64,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "muse_glimmer_text",
            "vocab_size": ids["__size__"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            # The real config's 0.196 is 1/sqrt(6656/256); the same ratio at this width, so LoRA can move the logits.
            "output_multiplier": (64 / 256) ** -0.5,
            "max_position_embeddings": 1024,
            "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "bos_token_id": ids["<|start|>"],
            "eos_token_id": [ids["<|end|>"], ids["<|eos|>"]],
            "pad_token_id": ids["<|pad|>"],
        },
        "vision_config": {
            "model_type": "muse_glimmer_vision",
            "patch_size": 14,
            "patch_temporal": 2,
            "merge_size": merge,
            # The position table's side is also the attention window's, in patches.
            "pos_emb_height": 2,
            "pos_emb_width": 2,
            "hidden_size": vision_width,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "layer_types": ["window_attention", "full_attention"],
        },
    }


def build_tiny_muse_glimmer(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny Muse Glimmer in `folder` (created if missing); returns its path."""
    from mlx_vlm.models import muse_glimmer

    from tools.kits.tiny_vlm_folder import _write_tokenizer, open_folder, write_model_folder

    folder = open_folder(folder)
    ids = _write_tokenizer(folder, vocab_size, MUSE_GLIMMER_SPECIAL, MUSE_GLIMMER_TEMPLATE)
    tokens = (MUSE_GLIMMER_IMAGE_SIDE // (14 * 2)) ** 2
    processor = {
        "processor_class": "MuseGlimmerProcessor",
        "image_processor": {"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "max_image_tokens": tokens},
    }
    return write_model_folder(folder, muse_glimmer, muse_glimmer_config(ids), seed, processor=processor)
