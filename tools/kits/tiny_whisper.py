"""Build a tiny random Whisper folder offline (config, safetensors, processor) as transformers saves one.

The tokenizer is the corpus BPE with Whisper's special tokens (every language, the tasks, `<|notimestamps|>`) added,
so `WhisperProcessor.from_pretrained(folder, language=..., task=...)` puts the forced prefix on labels as the Hub's
checkpoints do. The weights come from transformers' `WhisperForConditionalGeneration`, so this kit needs torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

MEL_BINS = 8
WIDTH = 32
# Whisper's window: the feature extractor pads every clip to it, and the encoder reads 50 positions a second.
WINDOW_SECONDS = 30
POSITIONS_PER_SECOND = 50


class WhisperShape(NamedTuple):
    """The sizes a tiny Whisper is built at; the benchmark's is wider, with Whisper's 80 mel bins."""

    mel_bins: int = MEL_BINS
    width: int = WIDTH
    layers: int = 1
    heads: int = 2


TINY = WhisperShape()


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


def _processor_and_config(cache_dir: Path | None, window_seconds: int, init_std: float, shape: WhisperShape) -> tuple:
    """The processor (corpus BPE with Whisper's special tokens) and the WhisperConfig a tiny Whisper is built from."""
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    end = "<|endoftext|>"
    backend = build_tokenizer(256, cache_dir=None if cache_dir is None else Path(cache_dir))
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=backend, unk_token=end, bos_token=end, eos_token=end, pad_token=end
    )
    tokenizer.add_special_tokens({"additional_special_tokens": whisper_special_tokens()})
    extractor = WhisperFeatureExtractor(feature_size=shape.mel_bins, chunk_length=window_seconds)
    processor = WhisperProcessor(extractor, tokenizer)
    end_id = tokenizer.convert_tokens_to_ids(end)
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        d_model=shape.width,
        encoder_layers=shape.layers,
        decoder_layers=shape.layers,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        # Four times the width, as every published Whisper has it.
        encoder_ffn_dim=4 * shape.width,
        decoder_ffn_dim=4 * shape.width,
        num_mel_bins=shape.mel_bins,
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
    return processor, config


def build_tiny_whisper(
    folder: str | Path,
    tokenizer_cache_dir: str | Path | None = None,
    seed: int = 0,
    window_seconds: int = WINDOW_SECONDS,
    init_std: float = 0.02,
    shape: WhisperShape = TINY,
) -> Path:
    """Write a loadable tiny Whisper (one encoder and one decoder layer, 32 wide, 8 mel bins) into `folder`; a
    window shorter than Whisper's 30 s makes the encoder's attention, which dominates a step on CPU, that much
    shorter."""
    import torch
    from transformers import WhisperForConditionalGeneration

    folder = Path(folder)
    processor, config = _processor_and_config(tokenizer_cache_dir, window_seconds, init_std, shape)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    # torch zeroes the padding row, and the output head is tied to it; Whisper pads with <|endoftext|>, whose row a
    # trained checkpoint has filled, so without this the model's logit for ending a transcription is always zero.
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[config.pad_token_id].normal_(0.0, init_std)
    model.generation_config = whisper_generation_config(processor.tokenizer, config)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_mlx_whisper(
    folder: str | Path, shape: WhisperShape, tokenizer_cache_dir: str | Path | None = None, seed: int = 0
) -> Path:
    """A Whisper folder without torch, for the benchmark: transformers' config and processor, and mlx-audio's
    randomly initialised model saved under its own weight names (which mlx-audio's loader and ours both read)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    processor, config = _processor_and_config(tokenizer_cache_dir, WINDOW_SECONDS, 0.02, shape)
    mx.random.seed(seed)
    model = Model(ModelDimensions.from_dict(config.to_dict()), dtype=mx.float32)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    config.save_pretrained(folder)
    whisper_generation_config(processor.tokenizer, config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
