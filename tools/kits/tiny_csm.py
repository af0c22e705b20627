"""Build a tiny random Sesame CSM folder offline as transformers saves `CsmForConditionalGeneration` (what the Hub's
`unsloth/csm-1b` holds): backbone, depth decoder and a tiny Mimi codec, with a `CsmProcessor` whose tokenizer is the
corpus BPE plus CSM's audio tokens and whose chat template writes `<bos>[speaker]text<eos>` then `<|AUDIO|><|audio_eos|>`.

The codec keeps Mimi's strides (the processor counts audio frames with them), only narrower; this kit needs torch.
"""

from __future__ import annotations

from pathlib import Path

CODEBOOKS = 4
CODEBOOK_VOCAB = 64
SAMPLE_RATE = 24000
BOS, EOS, AUDIO, AUDIO_EOS = "<|begin_of_text|>", "<|end_of_text|>", "<|AUDIO|>", "<|audio_eos|>"
# Written here for the tiny processor; it lays a conversation out as CSM's published template does.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- for item in message['content'] if item['type'] == 'text' -%}"
    "{{- bos_token ~ '[' ~ message['role'] ~ ']' ~ item['text'] ~ eos_token -}}"
    "{%- endfor -%}"
    "{%- for item in message['content'] if item['type'] == 'audio' -%}"
    "{{- '<|AUDIO|><|audio_eos|>' -}}"
    "{%- endfor -%}"
    "{%- endfor -%}"
)


def _processor(tokenizer_cache_dir: Path | None):
    from transformers import CsmProcessor, EncodecFeatureExtractor, PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    backend = build_tokenizer(256, cache_dir=tokenizer_cache_dir)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=EOS)
    tokenizer.add_special_tokens({"additional_special_tokens": [AUDIO, AUDIO_EOS]})
    extractor = EncodecFeatureExtractor(feature_size=1, sampling_rate=SAMPLE_RATE, padding_value=0.0)
    return CsmProcessor(extractor, tokenizer, chat_template=CHAT_TEMPLATE)


def build_tiny_csm(folder: str | Path, tokenizer_cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Write a loadable tiny CSM (one backbone and one depth-decoder layer, 32 wide, 4 codebooks) into `folder`."""
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration

    folder = Path(folder)
    processor = _processor(None if tokenizer_cache_dir is None else Path(tokenizer_cache_dir))
    tokenizer = processor.tokenizer
    heads = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}
    # Llama 3's RoPE scaling, as the published CSM's backbone and depth decoder have it.
    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    small = {"hidden_size": 32, "num_hidden_layers": 1, "intermediate_size": 64, "rope_parameters": rope, **heads}
    codec = {
        "hidden_size": 32,
        "num_filters": 4,
        "codebook_size": CODEBOOK_VOCAB,
        "codebook_dim": 16,
        "vector_quantization_hidden_dimension": 16,
        "num_quantizers": CODEBOOKS,
        "upsample_groups": 32,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
    }
    config = CsmConfig(
        **small,
        num_codebooks=CODEBOOKS,
        vocab_size=CODEBOOK_VOCAB,
        text_vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        audio_token_id=tokenizer.convert_tokens_to_ids(AUDIO),
        audio_eos_token_id=tokenizer.convert_tokens_to_ids(AUDIO_EOS),
        codebook_pad_token_id=CODEBOOK_VOCAB - 1,
        codebook_eos_token_id=0,
        max_position_embeddings=2048,
        depth_decoder_config={
            **small,
            "backbone_hidden_size": 32,
            "num_codebooks": CODEBOOKS,
            "vocab_size": CODEBOOK_VOCAB,
            "max_position_embeddings": CODEBOOKS + 1,
        },
        codec_config=codec,
    )
    torch.manual_seed(seed)
    model = CsmForConditionalGeneration(config)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
