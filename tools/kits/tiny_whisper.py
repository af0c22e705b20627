"""Build a tiny random Whisper folder offline (config, safetensors, processor) as transformers saves one.

The tokenizer is the corpus BPE with Whisper's special tokens (every language, the tasks, `<|notimestamps|>`) added,
so `WhisperProcessor.from_pretrained(folder, language=..., task=...)` puts the forced prefix on labels as the Hub's
checkpoints do. The weights come from transformers' `WhisperForConditionalGeneration`, so this kit needs torch.
"""

from __future__ import annotations

from pathlib import Path

MEL_BINS = 8
WIDTH = 32
# Whisper's window: the feature extractor pads every clip to it, and the encoder reads 50 positions a second.
WINDOW_SECONDS = 30
POSITIONS_PER_SECOND = 50


def whisper_special_tokens() -> list:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    languages = [f"<|{code}|>" for code in LANGUAGES]
    tasks = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>"]
    return ["<|startoftranscript|>", *languages, *tasks, "<|notimestamps|>"]


def whisper_generation_config(tokenizer, config):
    """The generation config a Hub Whisper ships, whose language and task tables `generate` reads."""
    from transformers import GenerationConfig
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    ids = tokenizer.convert_tokens_to_ids
    return GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        max_length=config.max_target_positions,
        is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES},
        task_to_id={"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")},
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        suppress_tokens=[],
        begin_suppress_tokens=None,
        return_timestamps=False,
    )


def build_tiny_whisper(
    folder: str | Path,
    tokenizer_cache_dir: str | Path | None = None,
    seed: int = 0,
    window_seconds: int = WINDOW_SECONDS,
    init_std: float = 0.02,
) -> Path:
    """Write a loadable tiny Whisper (one encoder and one decoder layer, 32 wide, 8 mel bins) into `folder`; a
    window shorter than Whisper's 30 s makes the encoder's attention, which dominates a step on CPU, that much
    shorter."""
    import torch
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    from tools.kits.tokenizer_kit import build_tokenizer

    folder = Path(folder)
    end = "<|endoftext|>"
    backend = build_tokenizer(256, cache_dir=None if tokenizer_cache_dir is None else Path(tokenizer_cache_dir))
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=backend, unk_token=end, bos_token=end, eos_token=end, pad_token=end
    )
    tokenizer.add_special_tokens({"additional_special_tokens": whisper_special_tokens()})
    extractor = WhisperFeatureExtractor(feature_size=MEL_BINS, chunk_length=window_seconds)
    processor = WhisperProcessor(extractor, tokenizer)
    end_id = tokenizer.convert_tokens_to_ids(end)
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        d_model=WIDTH,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        # Four times the width, as every published Whisper has it.
        encoder_ffn_dim=4 * WIDTH,
        decoder_ffn_dim=4 * WIDTH,
        num_mel_bins=MEL_BINS,
        max_source_positions=POSITIONS_PER_SECOND * window_seconds,
        max_target_positions=64,
        decoder_start_token_id=tokenizer.convert_tokens_to_ids("<|startoftranscript|>"),
        bos_token_id=end_id,
        eos_token_id=end_id,
        pad_token_id=end_id,
        suppress_tokens=[],
        begin_suppress_tokens=None,
        init_std=init_std,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    # torch zeroes the padding row, and the output head is tied to it; Whisper pads with <|endoftext|>, whose row a
    # trained checkpoint has filled, so without this the model's logit for ending a transcription is always zero.
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[end_id].normal_(0.0, init_std)
    model.generation_config = whisper_generation_config(tokenizer, config)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
