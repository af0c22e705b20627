"""A tiny Gemma 3n that `mlx-vlm` loads offline with its processor: a small text model, a small audio tower, and the
vision tower mlx-vlm always builds at full size (MobileNet-V5, 294,126,912 parameters, whatever the config says).

As in the real checkpoints, the image and audio soft tokens sit in id ranges of their own after the text vocabulary
(`vocab_offset` of each tower's embedder), each range opening with the tower's end marker. Weights are random; the
vision tower is written in bf16 (561 MiB), the rest in float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from tools.kits.tiny_vlm_folder import _model, _save_weights, _write_json

# Turn markers and the media openers below the per-layer vocabulary; then each tower's range (end marker first).
GEMMA3N_TEXT_SPECIAL = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<start_of_audio>"]
RANGE_SIZE = 4
VISION_RANGE = ["<end_of_image>", "<image_soft_token>", "<vision_spare_1>", "<vision_spare_2>"]
AUDIO_RANGE = ["<end_of_audio>", "<audio_soft_token>", "<audio_spare_1>", "<audio_spare_2>"]
GEMMA3N_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}<image_soft_token>"
    "{%- elif part['type'] == 'audio' %}<audio_soft_token>"
    "{%- elif part['type'] == 'text' %}{{ part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<end_of_turn>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# Audio tokens each clip expands to: the tower makes one per 160 ms, so a clip of up to 1.28 s fits.
AUDIO_TOKENS_PER_CLIP = 8
# mlx-vlm's fusion adapter always gives 16 by 16 image tokens, 2,048 wide.
IMAGE_TOKENS = 256
VISION_WIDTH = 2048
# A one-layer Conformer, 32 wide, over the 128 mel bins Gemma 3n's feature extractor makes.
GEMMA3N_AUDIO = {
    "input_feat_size": 128,
    "hidden_size": 32,
    "conf_num_hidden_layers": 1,
    "conf_num_attention_heads": 2,
    "conf_positional_bias_size": 16,
    "sscp_conv_channel_size": [8, 4],
}
GEMMA3N_END_OF_TURN = "<end_of_turn>"


def gemma3n_text_config(vocab: int, per_layer_vocab: int, layers: int = 2, shared: int = 0) -> Dict[str, Any]:
    """A two-layer Gemma 3n text model (AltUp, Laurel and per-layer inputs all kept, shrunk)."""
    return {
        "model_type": "gemma3n_text",
        "vocab_size": vocab,
        "vocab_size_per_layer_input": per_layer_vocab,
        "hidden_size": 64,
        "intermediate_size": [128] * layers,  # mlx-vlm reads one width per layer
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_kv_shared_layers": shared,
        "rms_norm_eps": 1e-6,
        "sliding_window": 64,
        "max_position_embeddings": 1024,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "activation_sparsity_pattern": [0.0] * layers,
        "hidden_size_per_layer_input": 8,
        "laurel_rank": 8,
        "altup_num_inputs": 4,
        "altup_coef_clip": 120.0,
        "final_logit_softcapping": 30.0,
    }


def gemma3n_config(ids: Dict[str, int], layers: int = 2, shared: int = 0) -> Dict[str, Any]:
    vision_offset, audio_offset = ids[VISION_RANGE[0]], ids[AUDIO_RANGE[0]]
    vocab = audio_offset + RANGE_SIZE
    return {
        "model_type": "gemma3n",
        "architectures": ["Gemma3nForConditionalGeneration"],
        "vocab_size": vocab,
        "hidden_size": VISION_WIDTH,
        "image_token_id": ids["<image_soft_token>"],
        "image_token_index": ids["<image_soft_token>"],
        "audio_token_id": ids["<audio_soft_token>"],
        "boi_token_id": ids["<start_of_image>"],
        "eoi_token_id": ids["<end_of_image>"],
        "boa_token_id": ids["<start_of_audio>"],
        "eoa_token_id": ids["<end_of_audio>"],
        "vision_soft_tokens_per_image": IMAGE_TOKENS,
        "audio_soft_tokens_per_image": AUDIO_TOKENS_PER_CLIP,
        "eos_token_id": [ids[GEMMA3N_END_OF_TURN], ids["<|eos|>"]],
        "pad_token_id": ids["<|pad|>"],
        "torch_dtype": "float32",
        "text_config": gemma3n_text_config(vocab, vision_offset, layers, shared),
        "vision_config": {
            "model_type": "gemma3n_vision",
            "hidden_size": VISION_WIDTH,
            "vocab_size": RANGE_SIZE,
            "vocab_offset": vision_offset,
        },
        "audio_config": {**GEMMA3N_AUDIO, "vocab_size": RANGE_SIZE, "vocab_offset": audio_offset},
    }


def _write_tokenizer(folder: Path, vocab_size: int, named: Dict[str, str]) -> Dict[str, int]:
    """The corpus BPE with the special tokens added in their order (so each tower's range is contiguous), then named
    (`audio_token`, ...) as the processor reads them; returns each special token's id and the size."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(vocab_size), pad_token="<|pad|>", eos_token="<|eos|>", bos_token="<|system|>"
    )
    special = GEMMA3N_TEXT_SPECIAL + VISION_RANGE + AUDIO_RANGE
    fast.add_special_tokens({"additional_special_tokens": special})
    fast.chat_template = GEMMA3N_TEMPLATE
    fast.save_pretrained(str(folder))
    # Naming tokens that already exist keeps their ids.
    AutoTokenizer.from_pretrained(str(folder), extra_special_tokens=named).save_pretrained(str(folder))
    ids = {token: int(fast.convert_tokens_to_ids(token)) for token in [*special, "<|pad|>", "<|eos|>"]}
    return ids | {"__size__": len(fast)}


def _vision_in_bf16(model: Any) -> None:
    import mlx.core as mx
    from mlx.utils import tree_map

    for name in ("vision_tower", "embed_vision"):
        getattr(model, name).update(
            tree_map(lambda value: value.astype(mx.bfloat16), getattr(model, name).parameters())
        )


def draw_correct_output_scales(language_model: Any) -> None:
    """mlx-vlm starts each layer's AltUp output scale at zero, which shuts the per-layer inputs out: draw them."""
    import mlx.core as mx

    for layer in language_model.model.layers:
        layer.altup.correct_output_scale = mx.random.uniform(0.5, 1.5, layer.altup.correct_output_scale.shape)


def build_tiny_gemma3n(
    folder: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    layers: int = 2,
    shared: int = 0,
    image_side: int = 768,
) -> Path:
    """A loadable tiny Gemma 3n (text, audio and mlx-vlm's fixed vision tower) in `folder`; `shared` of its
    `layers` reuse an earlier layer's keys and values, as the real checkpoints' last ones do; its processor resizes
    images to `image_side` pixels (the checkpoints' 768, or 512, the smallest the tower's fusion adapter takes).
    Returns its path."""
    from mlx_vlm.models import gemma3n

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    named = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
    named |= {"audio_token": "<audio_soft_token>", "boa_token": "<start_of_audio>", "eoa_token": "<end_of_audio>"}
    ids = _write_tokenizer(folder, vocab_size, named)
    if ids["__size__"] != ids[AUDIO_RANGE[0]] + RANGE_SIZE:
        raise AssertionError(f"the audio range must close the vocabulary: {ids}")
    config = gemma3n_config(ids, layers, shared)
    _write_json(folder / "config.json", config)
    _write_json(
        folder / "processor_config.json",
        {
            "processor_class": "Gemma3nProcessor",
            "audio_seq_length": AUDIO_TOKENS_PER_CLIP,
            "image_seq_length": IMAGE_TOKENS,
        },
    )
    # One file for both: transformers' auto classes each read their own type from it, as the Hub's checkpoints do.
    _write_json(
        folder / "preprocessor_config.json",
        {
            "processor_class": "Gemma3nProcessor",
            "feature_extractor_type": "Gemma3nAudioFeatureExtractor",
            "feature_size": 128,
            "sampling_rate": 16000,
            "image_processor_type": "SiglipImageProcessor",
            "size": {"height": image_side, "width": image_side},
            "image_mean": [0.0, 0.0, 0.0],
            "image_std": [1.0, 1.0, 1.0],
            "rescale_factor": 1 / 255,
        },
    )
    model = _model(gemma3n, config, seed)
    draw_correct_output_scales(model.language_model)
    _vision_in_bf16(model)
    _save_weights(folder, model)
    return folder
