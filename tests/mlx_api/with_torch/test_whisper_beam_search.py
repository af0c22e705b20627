"""Issue 49 item 3: beam search on the MLX Whisper gives the ids transformers' `WhisperForConditionalGeneration.generate`
gives on CPU torch from the same weights: through `model.generate(input_features, num_beams=...)`, through
`Seq2SeqTrainer` with `generation_num_beams` and `predict_with_generate`, and through the notebook's `pipeline` with
`generate_kwargs`. The tiny Whisper's `<|endoftext|>` row is scaled up so that hypotheses end at different lengths,
which is where the length penalty and the stopping rule decide the winner."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from unsloth import FastModel

from .test_whisper_notebook import DataCollatorSpeechSeq2SeqWithPadding, clip, load_notebook_model
from .test_whisper_training import generated_wer_metrics, generation_arguments, notebook_generation_settings

SAMPLE_RATE = 16000
NEW_TOKENS = 10
# Each setting changes the winner somewhere on the two clips (the test checks that each differs from greedy or from
# the plain 4-beam search), so a beam search that ignores one of them fails.
SETTINGS = [
    {"num_beams": 4},
    {"num_beams": 3, "length_penalty": 0.0},
    {"num_beams": 3, "length_penalty": 2.0, "early_stopping": "never"},
    {"num_beams": 4, "early_stopping": True, "num_return_sequences": 2},
]


@pytest.fixture(autouse=True, scope="module")
def torch_on_one_thread():
    """torch on one thread: on a tiny model its threads only fight over busy cores (10 ms a linear, not 0.1)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ending_whisper(tmp_path_factory):
    """The trainable tiny Whisper (a one-second window, weights at a trained model's scale) with its end token's
    tied embedding row tripled, so that some hypotheses end early."""
    import torch
    from transformers import WhisperForConditionalGeneration

    from tools.kits.tiny_whisper import build_tiny_whisper

    root = tmp_path_factory.mktemp("whisper_beams")
    folder = build_tiny_whisper(root / "model", tokenizer_cache_dir=root / "tokenizers", window_seconds=1, init_std=0.5)
    model = WhisperForConditionalGeneration.from_pretrained(str(folder))
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[model.config.eos_token_id] *= 3.0
    model.save_pretrained(folder)
    return folder


def torch_whisper(folder):
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(folder)).eval()
    notebook_generation_settings(model)
    return model


def features(processor, count: int = 2):
    clips = [clip(index) for index in range(count)]
    return processor.feature_extractor(clips, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features


def test_generate_with_beams_gives_transformers_ids(ending_whisper) -> None:
    import torch

    model, processor = load_notebook_model(ending_whisper)
    notebook_generation_settings(model)
    reference = torch_whisper(ending_whisper)
    inputs = features(processor)
    with torch.no_grad():
        greedy = reference.generate(inputs, max_new_tokens=NEW_TOKENS)
    assert torch.equal(model.generate(inputs, max_new_tokens=NEW_TOKENS), greedy)
    answers = []
    for setting in SETTINGS:
        with torch.no_grad():
            expected = reference.generate(inputs, max_new_tokens=NEW_TOKENS, **setting)
        actual = model.generate(input_features=inputs, max_new_tokens=NEW_TOKENS, **setting)
        print(f"{setting}: MLX {actual.tolist()}, transformers {expected.tolist()}")
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected)
        answers.append(expected)
    # Beam search wins somewhere greedy does not, and each setting changes a winner.
    assert not torch.equal(answers[0], greedy)
    assert not torch.equal(answers[1], answers[0]) and not torch.equal(answers[2], answers[0])
    assert not torch.equal(answers[3][::2], answers[0])
    # A numpy batch gives numpy ids, and a `max_length` counts the tokens after the prompt, as transformers' Whisper.
    with torch.no_grad():
        expected = reference.generate(inputs, num_beams=3, max_length=6).numpy()
    np.testing.assert_array_equal(model.generate(inputs.numpy(), num_beams=3, max_length=6), expected)


def test_generate_refuses_what_it_does_not_build(ending_whisper) -> None:
    model, processor = load_notebook_model(ending_whisper)
    inputs = features(processor, 1)
    with pytest.raises(NotImplementedError, match="do_sample=True"):
        model.generate(inputs, language="en", do_sample=True)
    with pytest.raises(NotImplementedError, match="temperature"):
        model.generate(inputs, language="en", num_beams=2, temperature=0.5)
    # transformers' checks, as it makes them.
    with pytest.raises(ValueError, match=r"num_return_sequences \(3\) has to be at most num_beams \(2\)"):
        model.generate(inputs, language="en", num_beams=2, num_return_sequences=3)
    with pytest.raises(ValueError, match="early_stopping must be a boolean or 'never'"):
        model.generate(inputs, language="en", num_beams=2, early_stopping="soon")
    # mlx-audio's own call on a waveform decodes greedily; beam search is transformers' call on input_features.
    with pytest.raises(NotImplementedError, match="input_features"):
        model.generate(clip(0), num_beams=4)


def rows_for(processor, texts: list) -> list:
    return [
        {
            "input_features": processor.feature_extractor(clip(index), sampling_rate=SAMPLE_RATE).input_features[0],
            "labels": processor.tokenizer(text).input_ids,
        }
        for index, text in enumerate(texts)
    ]


def test_seq2seq_trainer_predicts_with_transformers_beams(ending_whisper, tmp_path) -> None:
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, processor = load_notebook_model(ending_whisper)
    notebook_generation_settings(model)
    rows = rows_for(processor, ["red kettle", "blue bees", "green river"])
    collator = DataCollatorSpeechSeq2SeqWithPadding(processor=processor)
    arguments = {"generation_num_beams": 3, "generation_max_length": NEW_TOKENS}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*label_names", RuntimeWarning)
        trainer = Seq2SeqTrainer(
            model=FastModel.for_inference(model),
            train_dataset=rows,
            data_collator=collator,
            tokenizer=processor.feature_extractor,
            compute_metrics=generated_wer_metrics(processor, []),
            args=Seq2SeqTrainingArguments(**{**generation_arguments(tmp_path / "mlx"), **arguments}),
        )
    theirs = Seq2SeqTrainer(
        model=torch_whisper(ending_whisper),
        data_collator=collator,
        processing_class=processor.feature_extractor,
        compute_metrics=generated_wer_metrics(processor, []),
        args=Seq2SeqTrainingArguments(**{**generation_arguments(tmp_path / "torch", use_cpu=True), **arguments}),
    )
    for keywords in ({}, {"num_beams": 4}):
        ours, expected = trainer.predict(rows, **keywords), theirs.predict(rows, **keywords)
        print(f"{keywords}: MLX {ours.predictions.tolist()}, Seq2SeqTrainer {expected.predictions.tolist()}")
        np.testing.assert_array_equal(ours.predictions, expected.predictions)
        assert ours.metrics["test_wer"] == pytest.approx(expected.metrics["test_wer"])


def test_the_notebook_pipeline_transcribes_with_transformers_beams(ending_whisper) -> None:
    import torch
    from transformers import pipeline

    from .test_whisper_notebook import notebook_pipeline

    model, processor = load_notebook_model(ending_whisper)
    notebook_generation_settings(model)
    chosen = {"num_beams": 4, "max_new_tokens": NEW_TOKENS}
    with pytest.warns(RuntimeWarning, match="torch_dtype"):
        whisper = pipeline(
            "automatic-speech-recognition",
            model=FastModel.for_inference(model),
            tokenizer=processor.tokenizer,
            feature_extractor=processor.feature_extractor,
            processor=processor,
            torch_dtype="float16",
            generate_kwargs=chosen,
        )
    reference = pipeline(
        "automatic-speech-recognition",
        model=torch_whisper(ending_whisper),
        tokenizer=processor.tokenizer,
        feature_extractor=processor.feature_extractor,
        device="cpu",
        generate_kwargs=chosen,
    )
    audio = {"array": clip(1), "sampling_rate": SAMPLE_RATE}
    with torch.no_grad():
        expected = reference(dict(audio))["text"]
        greedy = reference(dict(audio), generate_kwargs={"num_beams": 1, "max_new_tokens": NEW_TOKENS})["text"]
    print(f"MLX {whisper(dict(audio))}, transformers {expected!r}, greedy {greedy!r}")
    assert whisper(dict(audio)) == {"text": expected} and expected != greedy
    # generate_kwargs at the call come before the pipeline's, as transformers' pipeline merges them.
    plain = notebook_pipeline(FastModel.for_inference(model), processor)
    assert plain(dict(audio), generate_kwargs=chosen) == {"text": expected}
    with pytest.raises(NotImplementedError, match="do_sample"):
        plain(dict(audio), generate_kwargs={"do_sample": True})
