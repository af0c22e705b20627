"""Issue 49, Whisper: after training through the notebook's calls, the model transcribes its training clips with a
lower WER than before; and `Seq2SeqTrainingArguments(predict_with_generate=True)` evaluates on the ids transformers'
`Seq2SeqTrainer` generates. The tiny Whisper here has a one-second window (so a step costs milliseconds on CPU) and
weights at a trained model's scale (`init_std=0.5`): at transformers' default of 0.02 every logit stays within about
one of the others, and no LoRA on `q_proj` / `v_proj` can make one token win."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from unsloth import FastModel

from .test_whisper_notebook import (
    DataCollatorSpeechSeq2SeqWithPadding,
    clip,
    load_notebook_model,
    notebook_arguments,
    notebook_pipeline,
    transcription_wer,
    word_error_rate,
)

TEXTS = ["red kettle", "blue bees"]


@pytest.fixture(scope="module")
def trainable_whisper(tmp_path_factory):
    from tools.kits.tiny_whisper import build_tiny_whisper

    root = tmp_path_factory.mktemp("whisper_wer")
    return build_tiny_whisper(root / "model", tokenizer_cache_dir=root / "tokenizers", window_seconds=1, init_std=0.5)


@dataclass
class StartStrippingCollator(DataCollatorSpeechSeq2SeqWithPadding):
    """The notebook's collator, cutting the label's leading `<|startoftranscript|>` as Hugging Face's Whisper
    fine-tuning guide does. The notebook compares it with `bos_token_id` (`<|endoftext|>`), which never matches, so it
    trains after a doubled start token; a tiny model then learns that prompt and not the pipeline's."""

    def __call__(self, features: list) -> dict:
        batch = super().__call__(features)
        start = self.processor.tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
        if (batch["labels"][:, 0] == start).all():
            batch["labels"] = batch["labels"][:, 1:]
        return batch


def test_training_lowers_the_word_error_rate_on_the_training_clips(trainable_whisper, tmp_path) -> None:
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_notebook_model(trainable_whisper)
    model = FastModel.get_peft_model(model, r=16, target_modules=["q_proj", "v_proj"], lora_alpha=16, task_type=None)
    clips = [clip(index) for index in range(len(TEXTS))]
    rows = [
        {
            "input_features": tokenizer.feature_extractor(audio, sampling_rate=16000).input_features[0],
            "labels": tokenizer.tokenizer(text).input_ids,
        }
        for audio, text in zip(clips, TEXTS)
    ]
    before = transcription_wer(notebook_pipeline(FastModel.for_inference(model), tokenizer), clips, TEXTS)

    # The notebook's arguments with a learning rate and step count that memorise two clips.
    arguments = {
        **notebook_arguments(tmp_path),
        "max_steps": 200,
        "learning_rate": 2e-2,
        "warmup_steps": 0,
        "lr_scheduler_type": "constant",
        "per_device_train_batch_size": len(rows),
        "logging_steps": 50,
    }
    with warnings.catch_warnings():
        # label_names is said once per process, and checked by the notebook test.
        warnings.filterwarnings("ignore", ".*label_names", RuntimeWarning)
        trainer = Seq2SeqTrainer(
            model=FastModel.for_training(model),
            train_dataset=rows,
            data_collator=StartStrippingCollator(processor=tokenizer),
            tokenizer=tokenizer.feature_extractor,
            args=Seq2SeqTrainingArguments(**arguments),
        )
    trainer.train()
    whisper = notebook_pipeline(FastModel.for_inference(model), tokenizer)
    texts = [whisper({"array": audio, "sampling_rate": 16000})["text"] for audio in clips]
    after = transcription_wer(whisper, clips, TEXTS)
    print(f"WER before {before:.2f}, after {after:.2f}: {texts}")
    assert before >= 1.0 and after <= 0.5
    assert any(text == wanted for text, wanted in zip(texts, TEXTS))


def generated_wer_metrics(tokenizer, seen: list):
    """Hugging Face's Whisper fine-tuning compute_metrics for predict_with_generate: the predictions are token ids."""

    def compute_metrics(pred) -> dict:
        seen.append(pred)
        label_ids = pred.label_ids.copy()
        label_ids[label_ids == -100] = tokenizer.tokenizer.pad_token_id
        pred_str = tokenizer.batch_decode(pred.predictions, skip_special_tokens=True)
        label_str = tokenizer.batch_decode(label_ids, skip_special_tokens=True)
        return {"wer": 100 * word_error_rate(pred_str, label_str)}

    return compute_metrics


def generation_arguments(output_dir, **extra) -> dict:
    return dict(
        output_dir=str(output_dir),
        per_device_eval_batch_size=2,
        remove_unused_columns=False,
        report_to="none",
        predict_with_generate=True,
        generation_max_length=12,
        generation_num_beams=1,
        **extra,
    )


def notebook_generation_settings(model) -> None:
    """The notebook's settings, and two suppression lists a Hub checkpoint's generation config carries."""
    model.generation_config.language = "<|en|>"
    model.generation_config.task = "transcribe"
    model.generation_config.forced_decoder_ids = None
    model.generation_config.suppress_tokens = [128]
    model.generation_config.begin_suppress_tokens = [112]


def test_predict_with_generate_evaluates_on_seq2seq_trainer_s_generated_ids(trainable_whisper, tmp_path) -> None:
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, WhisperForConditionalGeneration

    model, tokenizer = load_notebook_model(trainable_whisper)
    model = FastModel.get_peft_model(model, r=8, target_modules=["q_proj", "v_proj"], lora_alpha=8, task_type=None)
    notebook_generation_settings(model)
    # Four rows in batches of two: transformers credits a short last batch with the full batch size, MLX each row once.
    clips = [clip(index) for index in range(4)]
    rows = [
        {
            "input_features": tokenizer.feature_extractor(audio, sampling_rate=16000).input_features[0],
            "labels": tokenizer.tokenizer(text).input_ids,
        }
        for audio, text in zip(clips, [*TEXTS, "green river", "pale moon"])
    ]
    ours: list = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*label_names", RuntimeWarning)
        trainer = Seq2SeqTrainer(
            model=model,
            train_dataset=rows,
            eval_dataset=rows,
            data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer),
            tokenizer=tokenizer.feature_extractor,
            compute_metrics=generated_wer_metrics(tokenizer, ours),
            args=Seq2SeqTrainingArguments(**generation_arguments(tmp_path / "mlx")),
        )
    metrics = trainer.evaluate()

    reference = WhisperForConditionalGeneration.from_pretrained(str(trainable_whisper))
    notebook_generation_settings(reference)
    theirs: list = []
    expected = Seq2SeqTrainer(
        model=reference,
        eval_dataset=rows,
        data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer),
        processing_class=tokenizer.feature_extractor,
        compute_metrics=generated_wer_metrics(tokenizer, theirs),
        args=Seq2SeqTrainingArguments(**generation_arguments(tmp_path / "torch", use_cpu=True)),
    ).evaluate()
    print(f"MLX {metrics}\nSeq2SeqTrainer {expected}")
    assert abs(metrics["eval_loss"] - expected["eval_loss"]) <= 1e-4
    assert metrics["eval_wer"] == pytest.approx(expected["eval_wer"])
    np.testing.assert_array_equal(ours[0].predictions, theirs[0].predictions)
    np.testing.assert_array_equal(ours[0].label_ids, theirs[0].label_ids)
    assert ours[0].predictions.shape == (len(rows), model.generation_config.max_length)

    # Beam search is built (test_whisper_beam_search.py); sampling is not.
    model.generation_config.do_sample = True
    with pytest.raises(NotImplementedError, match="do_sample=True"):
        trainer.evaluate()
    model.generation_config.do_sample = False
    model.generation_config.language = None
    with pytest.raises(NotImplementedError, match="generation_config.language"):
        trainer.evaluate()


def test_predict_returns_seq2seq_trainer_s_prediction_output(trainable_whisper, tmp_path) -> None:
    """`trainer.predict(test_dataset)` with predict_with_generate: transformers' generated ids, labels and test_ metrics."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, WhisperForConditionalGeneration

    model, tokenizer = load_notebook_model(trainable_whisper)
    model = FastModel.get_peft_model(model, r=8, target_modules=["q_proj", "v_proj"], lora_alpha=8, task_type=None)
    notebook_generation_settings(model)
    rows = [
        {
            "input_features": tokenizer.feature_extractor(clip(index), sampling_rate=16000).input_features[0],
            "labels": tokenizer.tokenizer(text).input_ids,
        }
        for index, text in enumerate([*TEXTS, "green river"])
    ]
    collator = DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*label_names", RuntimeWarning)
        trainer = Seq2SeqTrainer(
            model=model,
            train_dataset=rows[:2],
            data_collator=collator,
            tokenizer=tokenizer.feature_extractor,
            compute_metrics=generated_wer_metrics(tokenizer, []),
            args=Seq2SeqTrainingArguments(**generation_arguments(tmp_path / "mlx")),
        )
    ours = trainer.predict(rows)

    reference = WhisperForConditionalGeneration.from_pretrained(str(trainable_whisper))
    notebook_generation_settings(reference)
    theirs = Seq2SeqTrainer(
        model=reference,
        data_collator=collator,
        processing_class=tokenizer.feature_extractor,
        compute_metrics=generated_wer_metrics(tokenizer, []),
        args=Seq2SeqTrainingArguments(**generation_arguments(tmp_path / "torch", use_cpu=True)),
    ).predict(rows)
    print(f"MLX {ours.metrics}\nSeq2SeqTrainer {theirs.metrics}")
    np.testing.assert_array_equal(ours.predictions, theirs.predictions)
    np.testing.assert_array_equal(ours.label_ids, theirs.label_ids)
    assert abs(ours.metrics["test_loss"] - theirs.metrics["test_loss"]) <= 1e-4
    assert ours.metrics["test_wer"] == pytest.approx(theirs.metrics["test_wer"])
    # model_preparation_time is torch's device placement, which MLX has none of.
    assert set(theirs.metrics) - {"test_model_preparation_time"} <= set(ours.metrics)
    with pytest.raises(NotImplementedError, match="cannot honour temperature"):
        trainer.predict(rows, temperature=0.5)
    with pytest.raises(NotImplementedError, match="without ignore_keys"):
        trainer.predict(rows, ignore_keys=["encoder_last_hidden_state"])
