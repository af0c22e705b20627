"""A tiny DeepSeek-OCR that `mlx-vlm` loads offline with its processor: a one-layer DeepSeek-V2 language model, one
CLIP layer, and the SAM encoder mlx-vlm always builds at full size (95,569,152 parameters, whatever the config says).

The processor's base resolution (`candidate_resolutions`, the global view's side) is 512, DeepSeek-OCR's "Tiny" mode,
so SAM runs on 1,024 patches and each image fills 73 tokens. Weights are random, in float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from tools.kits.tiny_vlm_folder import _model, _save_weights, _write_json, _write_tokenizer

# The tokens mlx-vlm's processor adds when the tokenizer lacks them; here they exist, so the model's vocabulary covers them.
DEEPSEEK_OCR_SPECIAL = [
    "<image>",
    "<|ref|>",
    "<|/ref|>",
    "<|det|>",
    "<|/det|>",
    "<|grounding|>",
    "<|User|>",
    "<|Assistant|>",
]
# The Hub repo's prompt format: `<image>` then the question in the user turn, the answer after `<|Assistant|>`.
DEEPSEEK_OCR_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' %}<|User|>: {% else %}<|Assistant|>: {% endif -%}"
    "{%- if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{ '<image>\\n' }}"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' %}<|eos|>{% endif %}{{ '\\n\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|Assistant|>: {% endif -%}"
)
BASE_SIZE = 512


def deepseekocr_config(ids: Dict[str, int]) -> Dict[str, Any]:
    text = {
        "model_type": "deepseek_v2", "vocab_size": ids["__size__"], "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
        "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 0, "v_head_dim": 16, "qk_nope_head_dim": 0,
    }  # fmt: skip
    return {
        "model_type": "deepseekocr",
        "architectures": ["DeepseekOCRForCausalLM"],
        "image_token_index": ids["<image>"],
        "eos_token_id": ids["<|eos|>"],
        "pad_id": ids["<|pad|>"],
        "torch_dtype": "float32",
        "text_config": text,
        # CLIP's width is SAM's output width, as the projector reads both side by side.
        "vision_config": {"model_type": "vision", "layers": 1, "hidden_size": 1024, "intermediate_size": 64},
        "projector_config": {"projector_type": "linear", "input_dim": 2048, "n_embed": 64},
    }


def build_tiny_deepseekocr(folder: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """A loadable tiny DeepSeek-OCR in `folder`; returns its path."""
    from mlx_vlm.models import deepseekocr

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _write_tokenizer(folder, vocab_size, DEEPSEEK_OCR_SPECIAL, DEEPSEEK_OCR_TEMPLATE)
    config = deepseekocr_config(ids)
    _write_json(folder / "config.json", config)
    _write_json(
        folder / "processor_config.json",
        {
            "processor_class": "DeepseekOCRProcessor",
            "candidate_resolutions": [[BASE_SIZE, BASE_SIZE]],
            "patch_size": 16,
            "downsample_ratio": 4,
        },
    )
    _save_weights(folder, _model(deepseekocr, config, seed))
    return folder
