"""Issue 49 item 3: the Whisper notebook's cells on a tiny random Whisper built offline (`tools/kits/tiny_whisper.py`):
`FastModel.from_pretrained(..., auto_model=WhisperForConditionalGeneration, whisper_language=, whisper_task=)` loads
mlx-audio's Whisper with transformers' logits, LoRA goes on `q_proj` / `v_proj` with `task_type=None`, and
`Seq2SeqTrainer` with the notebook's collator trains it on MLX from transformers' step-0 loss (`Seq2SeqTrainer` with
PEFT on CPU torch)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from unsloth import FastModel, UnslothTrainer

from ..conftest import QUESTIONS

SAMPLE_RATE = 16000
TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def whisper_folder(tmp_path_factory):
    from tools.kits.tiny_whisper import build_tiny_whisper

    root = tmp_path_factory.mktemp("whisper")
    return build_tiny_whisper(root / "model", tokenizer_cache_dir=root / "tokenizers")


def clip(index: int) -> np.ndarray:
    times = np.arange(int((0.5 + 0.25 * index) * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 180.0 * (index + 1) * times)).astype(np.float32)


def load_notebook_model(folder) -> tuple:
    from transformers import WhisperForConditionalGeneration

    return FastModel.from_pretrained(
        model_name=str(folder),
        dtype=None,
        load_in_4bit=False,
        auto_model=WhisperForConditionalGeneration,
        whisper_language="English",
        whisper_task="transcribe",
    )


def notebook_rows(tokenizer) -> list:
    """The notebook's `formatting_prompts_func`: log-mel features and the text's ids (forced prefix first)."""
    rows = []
    for index, (_, answer) in enumerate(QUESTIONS[:4]):
        features = tokenizer.feature_extractor(clip(index), sampling_rate=SAMPLE_RATE)
        rows.append({"input_features": features.input_features[0], "labels": tokenizer.tokenizer(answer).input_ids})
    return rows


@dataclass
class DataCollatorSpeechSeq2SeqWithPadding:
    """The notebook's collator: features padded by the feature extractor, labels padded with -100."""

    processor: Any

    def __call__(self, features: list) -> dict:
        batch = self.processor.feature_extractor.pad(
            [{"input_features": feature["input_features"]} for feature in features], return_tensors="pt"
        )
        labels_batch = self.processor.tokenizer.pad(
            [{"input_ids": feature["labels"]} for feature in features], return_tensors="pt"
        )
        labels = labels_batch["input_ids"].masked_fill(labels_batch.attention_mask.ne(1), -100)
        if (labels[:, 0] == self.processor.tokenizer.bos_token_id).all().cpu().item():
            labels = labels[:, 1:]
        batch["labels"] = labels
        return batch


def notebook_arguments(output_dir) -> dict:
    """The notebook's arguments, but one micro-batch a step: with more, transformers logs Whisper's loss times the
    accumulation steps (Whisper's forward takes `num_items_in_batch` but still returns a mean), MLX the mean itself."""
    return dict(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        warmup_steps=5,
        max_steps=1,
        learning_rate=1e-4,
        logging_steps=1,
        weight_decay=0.001,
        remove_unused_columns=False,
        lr_scheduler_type="linear",
        label_names=["labels"],
        seed=3407,
        output_dir=str(output_dir),
        report_to="none",
    )


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def test_whisper_loads_with_transformers_logits_and_the_forced_prefix(whisper_folder) -> None:
    import mlx.core as mx
    import torch
    from transformers import WhisperForConditionalGeneration

    model, tokenizer = load_notebook_model(whisper_folder)
    labels = tokenizer.tokenizer("The kettle is red.").input_ids
    prefix = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    assert tokenizer.tokenizer.convert_ids_to_tokens(labels[:4]) == prefix
    features = tokenizer.feature_extractor(clip(1), sampling_rate=SAMPLE_RATE).input_features
    reference = WhisperForConditionalGeneration.from_pretrained(str(whisper_folder)).eval()
    with torch.no_grad():
        expected = reference(input_features=torch.tensor(features), decoder_input_ids=torch.tensor([labels])).logits
    actual = np.array(model(mx.array(features.transpose(0, 2, 1)), mx.array([labels])))
    gap = float(np.abs(actual - expected.numpy()).max())
    print(f"largest logit gap {gap:.2e}")
    assert gap <= 1e-3 and float(expected.abs().max()) > 0.1


def test_without_lora_the_merged_folder_gives_back_the_checkpoint_s_tensors(whisper_folder, tmp_path) -> None:
    import mlx.core as mx

    model, tokenizer = load_notebook_model(whisper_folder)
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_32bit")
    source, merged = (
        mx.load(str(whisper_folder / "model.safetensors")),
        mx.load(str(tmp_path / "merged/model.safetensors")),
    )
    assert sorted(merged) == sorted(source)
    assert all(np.array_equal(np.array(merged[name]), np.array(source[name].astype(mx.float32))) for name in source)
    with pytest.raises(NotImplementedError, match="without LoRA: there is no adapter"):
        model.save_pretrained(str(tmp_path / "adapter"))


def torch_step_zero_loss(folder, rows: list, processor, output_dir) -> float:
    """transformers' Seq2SeqTrainer with PEFT's LoRA on the same checkpoint, rows and collator, on CPU torch."""
    from peft import LoraConfig, get_peft_model
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(folder))
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS, bias="none")
    with warnings.catch_warnings():
        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing`.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        peft_model = get_peft_model(model, config)
    trainer = Seq2SeqTrainer(
        model=peft_model,
        train_dataset=rows,
        data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=processor),
        processing_class=processor.feature_extractor,
        args=Seq2SeqTrainingArguments(**notebook_arguments(output_dir), optim="adamw_torch", use_cpu=True),
    )
    return first_loss(trainer)


def test_seq2seq_trainer_trains_whisper_on_mlx_from_transformers_step_zero_loss(
    whisper_folder, tmp_path, caplog
) -> None:
    from mlx.utils import tree_flatten
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_notebook_model(whisper_folder)
    model = FastModel.get_peft_model(
        model,
        r=8,
        target_modules=TARGETS,
        lora_alpha=16,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing="unsloth",
        random_state=3407,
        use_rslora=False,
        loftq_config=None,
        task_type=None,
    )
    model.generation_config.language = "<|en|>"
    model.generation_config.task = "transcribe"
    model.config.suppress_tokens = []
    model.generation_config.forced_decoder_ids = None
    trainable = [name for name, _ in tree_flatten(model.trainable_parameters())]
    assert trainable and all(".query.lora_" in name or ".value.lora_" in name for name in trainable)
    # As PEFT matches `q_proj` / `v_proj` in transformers' Whisper: the encoder's attention and the decoder's self and
    # cross attention, each with lora_a and lora_b.
    assert len(trainable) == len(TARGETS) * 3 * 2

    rows = notebook_rows(tokenizer)
    # label_names only tells transformers' trainer which inputs are labels; MLX reads the collator's `labels`.
    with pytest.warns(RuntimeWarning, match="label_names"):
        trainer = Seq2SeqTrainer(
            model=model,
            train_dataset=rows,
            data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer),
            tokenizer=tokenizer.feature_extractor,
            args=Seq2SeqTrainingArguments(**notebook_arguments(tmp_path / "mlx"), optim="adamw_8bit"),
        )
    assert isinstance(trainer, UnslothTrainer)
    routed = first_loss(trainer)
    # Its adapters are LoRA: no warning that the whole model is about to be trained.
    assert "has no LoRA adapters" not in caplog.text
    expected = torch_step_zero_loss(whisper_folder, rows, tokenizer, tmp_path / "torch")
    print(f"step-0 loss: MLX {routed:.6f}, Seq2SeqTrainer + PEFT {expected:.6f}")
    assert abs(routed - expected) <= 1e-4

    # The inference switch works; the merged save writes a folder transformers loads, with the trained logits.
    assert FastModel.for_inference(model) is model and not model.training
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_16bit")
    gap = merged_logits_gap(model, tokenizer, tmp_path / "merged")
    print(f"merged_16bit logits gap {gap:.2e}")
    assert gap <= 1e-3
    with pytest.raises(NotImplementedError, match="merged_4bit.*bitsandbytes"):
        model.save_pretrained_merged(str(tmp_path / "four"), tokenizer, save_method="merged_4bit")


def merged_logits_gap(model, processor, folder) -> float:
    """The largest gap between the MLX model's logits and those of the merged folder loaded by transformers (fp32)."""
    import mlx.core as mx
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    labels = processor.tokenizer("Snow settles on the pines.").input_ids
    features = processor.feature_extractor(clip(2), sampling_rate=SAMPLE_RATE).input_features
    actual = np.array(model(mx.array(features.transpose(0, 2, 1)), mx.array([labels])))
    merged = WhisperForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
    assert WhisperProcessor.from_pretrained(str(folder)).tokenizer("Snow settles on the pines.").input_ids == labels
    with torch.no_grad():
        expected = merged(input_features=torch.tensor(features), decoder_input_ids=torch.tensor([labels])).logits
    return float(np.abs(actual - expected.numpy()).max())


def test_the_saved_adapter_is_peft_s_for_transformers_whisper(whisper_folder, tmp_path) -> None:
    import mlx.core as mx
    import torch
    from mlx.utils import tree_flatten, tree_unflatten
    from peft import PeftModel
    from transformers import WhisperForConditionalGeneration

    model, tokenizer = load_notebook_model(whisper_folder)
    model = FastModel.get_peft_model(model, r=8, target_modules=TARGETS, lora_alpha=16, task_type=None)
    # Random B matrices (PEFT starts them at zero), so a misplaced or untransposed weight shows in the logits.
    mx.random.seed(1)
    trained = [
        (name, mx.random.normal(value.shape) * 0.5) for name, value in tree_flatten(model.trainable_parameters())
    ]
    model.update(tree_unflatten(trained))
    model.save_pretrained(str(tmp_path / "whisper_lora"))
    tokenizer.save_pretrained(str(tmp_path / "whisper_lora"))
    with pytest.raises(NotImplementedError, match="finetune_vision_layers=True"):
        FastModel.get_peft_model(load_notebook_model(whisper_folder)[0], finetune_vision_layers=True)

    labels = tokenizer.tokenizer("Snow settles on the pines.").input_ids
    features = tokenizer.feature_extractor(clip(2), sampling_rate=SAMPLE_RATE).input_features
    actual = np.array(model(mx.array(features.transpose(0, 2, 1)), mx.array([labels])))
    base = WhisperForConditionalGeneration.from_pretrained(str(whisper_folder))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        reference = PeftModel.from_pretrained(base, str(tmp_path / "whisper_lora")).eval()
    with torch.no_grad():
        expected = reference(input_features=torch.tensor(features), decoder_input_ids=torch.tensor([labels])).logits
    gap = float(np.abs(actual - expected.numpy()).max())
    print(f"adapter logits gap {gap:.2e}")
    assert gap <= 1e-4
    # The same adapters folded into a transformers folder, which loads without PEFT.
    model.save_pretrained_merged(str(tmp_path / "merged"), tokenizer, save_method="merged_32bit")
    merged_gap = merged_logits_gap(model, tokenizer, tmp_path / "merged")
    print(f"merged_32bit logits gap {merged_gap:.2e}")
    assert merged_gap <= 1e-3
    with reference.disable_adapter(), torch.no_grad():
        unadapted = reference(input_features=torch.tensor(features), decoder_input_ids=torch.tensor([labels])).logits
    assert float((expected - unadapted).abs().max()) > 1e-2


def word_error_rate(predictions: list, references: list) -> float:
    """evaluate's "wer" (jiwer's): word edits over reference words, summed over the texts."""
    edits = words = 0
    for predicted, reference in zip(predictions, references):
        said, meant = predicted.split(), reference.split()
        row = list(range(len(said) + 1))
        for index, word in enumerate(meant, 1):
            previous, row[0] = row[0], index
            for slot, guess in enumerate(said, 1):
                previous, row[slot] = row[slot], min(row[slot] + 1, row[slot - 1] + 1, previous + (guess != word))
        edits, words = edits + row[-1], words + len(meant)
    return edits / words


def notebook_compute_metrics(tokenizer, seen: list):
    """The notebook's compute_metrics (argmax of `pred.predictions[0]`), with the WER above for evaluate's."""

    def compute_metrics(pred) -> dict:
        seen.append(pred)
        pred_logits = pred.predictions[0]
        label_ids = pred.label_ids.copy()
        label_ids[label_ids == -100] = tokenizer.tokenizer.pad_token_id
        pred_ids = np.argmax(pred_logits, axis=-1)
        pred_str = tokenizer.batch_decode(pred_ids, skip_special_tokens=True)
        label_str = tokenizer.batch_decode(label_ids, skip_special_tokens=True)
        return {"wer": 100 * word_error_rate(pred_str, label_str)}

    return compute_metrics


def torch_evaluation(folder, rows: list, processor, output_dir) -> dict:
    """transformers' Seq2SeqTrainer.evaluate() with the notebook's compute_metrics on the untrained checkpoint."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, WhisperForConditionalGeneration

    trainer = Seq2SeqTrainer(
        model=WhisperForConditionalGeneration.from_pretrained(str(folder)),
        eval_dataset=rows,
        data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=processor),
        processing_class=processor.feature_extractor,
        compute_metrics=notebook_compute_metrics(processor, []),
        args=Seq2SeqTrainingArguments(
            output_dir=str(output_dir),
            per_device_eval_batch_size=2,
            remove_unused_columns=False,
            report_to="none",
            use_cpu=True,
        ),
    )
    return trainer.evaluate()


def transcription_wer(whisper, clips: list, texts: list) -> float:
    return word_error_rate([whisper(clip_)["text"] for clip_ in clips], texts)


def torch_greedy_text(folder, processor, waveform: np.ndarray) -> str:
    """transformers' Whisper on CPU decoding greedily after the forced prefix until <|endoftext|>."""
    import torch
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(str(folder)).eval()
    features = processor.feature_extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    ids = list(processor.tokenizer.prefix_tokens)
    end = processor.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    with torch.no_grad():
        encoded = model.model.encoder(features)
        while len(ids) < model.config.max_target_positions:
            logits = model(encoder_outputs=encoded, decoder_input_ids=torch.tensor([ids])).logits
            token = int(logits[0, -1].argmax())
            if token == end:
                break
            ids.append(token)
    return processor.tokenizer.decode(ids, skip_special_tokens=True)


def notebook_pipeline(model, tokenizer):
    """The inference cell's call; torch_dtype and return_language change nothing on MLX, and say so."""
    from transformers import pipeline

    with pytest.warns(RuntimeWarning, match="torch_dtype"):
        return pipeline(
            "automatic-speech-recognition",
            model=model,
            tokenizer=tokenizer.tokenizer,
            feature_extractor=tokenizer.feature_extractor,
            processor=tokenizer,
            return_language=True,
            torch_dtype="float16",
        )


def test_whisper_evaluates_and_transcribes_as_transformers_does(whisper_folder, tmp_path) -> None:
    """The trainer cell's eval_dataset and compute_metrics give Seq2SeqTrainer.evaluate()'s numbers, and the
    inference cell's pipeline gives transformers' greedy transcription, on the untrained model."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model, tokenizer = load_notebook_model(whisper_folder)
    model = FastModel.get_peft_model(model, r=8, target_modules=TARGETS, lora_alpha=16, task_type=None)
    # Four rows, two eval batches of two (a short last batch is credited with the full batch size on both sides).
    rows = notebook_rows(tokenizer)
    seen: list = []
    with warnings.catch_warnings():
        # Said once per process, and checked by the training test above.
        warnings.filterwarnings("ignore", ".*label_names", RuntimeWarning)
        trainer = Seq2SeqTrainer(
            model=model,
            train_dataset=rows,
            data_collator=DataCollatorSpeechSeq2SeqWithPadding(processor=tokenizer),
            eval_dataset=rows,
            tokenizer=tokenizer.feature_extractor,
            compute_metrics=notebook_compute_metrics(tokenizer, seen),
            args=Seq2SeqTrainingArguments(
                **notebook_arguments(tmp_path / "mlx"),
                eval_steps=5,
                eval_strategy="steps",
                per_device_eval_batch_size=2,
            ),
        )
    untrained = trainer.evaluate()
    expected = torch_evaluation(whisper_folder, rows, tokenizer, tmp_path / "torch")
    print(f"untrained eval: MLX {untrained}, Seq2SeqTrainer {expected}")
    assert abs(untrained["eval_loss"] - expected["eval_loss"]) <= 1e-4
    assert untrained["eval_wer"] == pytest.approx(expected["eval_wer"])
    predictions, labels = seen[0].predictions, seen[0].label_ids
    assert predictions[0].shape[:2] == labels.shape and predictions[0].shape[2] == len(tokenizer.tokenizer)
    assert (labels == -100).any() and predictions[1].shape[0] == len(rows)

    whisper = notebook_pipeline(FastModel.for_inference(model), tokenizer)
    transcribed = whisper({"array": clip(1), "sampling_rate": SAMPLE_RATE})
    assert transcribed == {"text": torch_greedy_text(whisper_folder, tokenizer, clip(1))}
    with pytest.raises(NotImplementedError, match="does not resample"):
        whisper({"array": clip(1), "sampling_rate": 8000})

    # Inside train(), evaluation with compute_metrics runs where transformers' flow asks: here the last step.
    trainer.train()
    assert [entry["step"] for entry in trainer.state.log_history if "eval_wer" in entry] == [1]


def test_whisper_generate_on_a_waveform_refuses_beams_by_name(whisper_folder) -> None:
    """mlx-audio's own `generate` on a waveform decodes greedily and would drop `num_beams` silently: refused here,
    naming transformers' call on `input_features`, which has beam search (test_whisper_beam_search.py)."""
    model, _ = load_notebook_model(whisper_folder)
    with pytest.raises(NotImplementedError, match="num_beams=4.*input_features"):
        model.generate(clip(0), num_beams=4)
