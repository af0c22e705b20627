"""Issue 49 item 4: a speech checkpoint or keyword that MLX cannot honour is refused by its own name and reason,
not by mlx-lm's "Model type ... not supported" nor by a message about quantized bases."""

from __future__ import annotations

import pytest

from unsloth import FastLanguageModel, FastModel


# CSM's special text tokens, placed inside the tiny text vocabulary.
TEXT_SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "audio_token_id", "audio_eos_token_id")


@pytest.fixture(scope="module")
def speech_folders(tmp_path_factory) -> dict:
    """Tiny random CSM and Whisper checkpoints as transformers saves them (built offline, a few seconds)."""
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration, WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("speech")
    heads = {"num_attention_heads": 2, "num_key_value_heads": 2}
    small = {"hidden_size": 32, "num_hidden_layers": 1, "intermediate_size": 64, **heads}
    codec = {"num_filters": 8, "head_dim": 16, "codebook_size": 64, "codebook_dim": 16, "num_quantizers": 4}
    csm = CsmConfig(
        **small,
        num_codebooks=4,
        vocab_size=64,
        text_vocab_size=256,
        **{name: index for index, name in enumerate(TEXT_SPECIAL_TOKENS, start=1)},
        depth_decoder_config={**small, "backbone_hidden_size": 32, "num_codebooks": 4, "vocab_size": 64},
        codec_config={**small, **codec, "vector_quantization_hidden_dimension": 16, "upsample_groups": 32},
    )
    whisper = WhisperConfig(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=32,
    )
    folders = {"csm": root / "csm", "whisper": root / "whisper"}
    CsmForConditionalGeneration(csm).save_pretrained(folders["csm"])
    WhisperForConditionalGeneration(whisper).save_pretrained(folders["whisper"])
    return folders


def test_a_csm_checkpoint_given_to_the_text_loader_is_sent_to_fast_model(speech_folders) -> None:
    with pytest.raises(NotImplementedError, match=r"'csm': Sesame CSM .*auto_model=CsmForConditionalGeneration"):
        FastLanguageModel.from_pretrained(str(speech_folders["csm"]), max_seq_length=64, load_in_4bit=False)


def test_a_quantized_csm_and_another_auto_model_are_refused_by_name(speech_folders) -> None:
    from transformers import WhisperForConditionalGeneration

    folder = str(speech_folders["csm"])
    with pytest.raises(NotImplementedError, match="quantized CSM base"):
        FastModel.from_pretrained(folder, load_in_4bit=True)
    with pytest.raises(
        NotImplementedError, match="auto_model=WhisperForConditionalGeneration: this checkpoint is 'csm'"
    ):
        FastModel.from_pretrained(folder, auto_model=WhisperForConditionalGeneration, load_in_4bit=False)


def test_a_whisper_checkpoint_given_to_the_text_loader_is_sent_to_fast_model(speech_folders) -> None:
    with pytest.raises(NotImplementedError, match=r"'whisper': Whisper .*auto_model=WhisperForConditionalGeneration"):
        FastLanguageModel.from_pretrained(str(speech_folders["whisper"]), load_in_4bit=False)


@pytest.mark.parametrize("keyword", ["whisper_language", "whisper_task"])
def test_whisper_keywords_on_a_text_checkpoint_are_refused_with_their_own_reason(tiny_model_dir, keyword) -> None:
    value = {"whisper_language": "English", "whisper_task": "transcribe"}[keyword]
    with pytest.raises(NotImplementedError) as caught:
        FastModel.from_pretrained(str(tiny_model_dir), **{keyword: value})
    message = str(caught.value)
    assert f"{keyword}={value!r}" in message and "not a Whisper" in message
    assert "4-bit" not in message and "quantized" not in message


def test_a_quantized_whisper_and_another_auto_model_are_refused_by_name(speech_folders) -> None:
    from transformers import CsmForConditionalGeneration

    folder = str(speech_folders["whisper"])
    with pytest.raises(NotImplementedError, match="quantized Whisper base"):
        FastModel.from_pretrained(folder, load_in_4bit=True)
    with pytest.raises(
        NotImplementedError, match="auto_model=CsmForConditionalGeneration: this checkpoint is 'whisper'"
    ):
        FastModel.from_pretrained(folder, auto_model=CsmForConditionalGeneration, load_in_4bit=False)
