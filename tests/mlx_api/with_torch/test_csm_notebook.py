"""Issue 49 item 2: the Sesame CSM notebook's cells on a tiny random CSM built offline (`tools/kits/tiny_csm.py`):
`FastModel.from_pretrained(..., auto_model=CsmForConditionalGeneration)` loads mlx-audio's Sesame model, LoRA goes on
the notebook's seven names, transformers' `Trainer` trains it on MLX from the step-0 loss of transformers' `Trainer`
with PEFT on CPU torch, `model.generate` gives transformers' frames, and the adapter reloads into PEFT."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from unsloth import FastModel, UnslothTrainer

from ..conftest import QUESTIONS

SAMPLE_RATE = 24000
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def csm_folder(tmp_path_factory):
    from tools.kits.tiny_csm import build_tiny_csm

    root = tmp_path_factory.mktemp("csm")
    return build_tiny_csm(root / "model", tokenizer_cache_dir=root / "tokenizers")


def clip(index: int) -> np.ndarray:
    times = np.arange(int((0.2 + 0.1 * index) * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 150.0 * (index + 1) * times)).astype(np.float32)


def load_notebook_model(folder) -> tuple:
    from transformers import CsmForConditionalGeneration

    return FastModel.from_pretrained(
        model_name=str(folder),
        max_seq_length=2048,
        dtype=None,
        auto_model=CsmForConditionalGeneration,
        load_in_4bit=False,
    )


def with_notebook_lora(model):
    return FastModel.get_peft_model(
        model,
        r=32,
        target_modules=TARGETS,
        lora_alpha=32,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing="unsloth",
        random_state=3407,
        use_rslora=False,
        loftq_config=None,
    )


def notebook_rows(processor) -> list:
    """The notebook's `preprocess_example` on four clips: right-padded text, padded audio, labels."""
    rows = []
    for index, (_, answer) in enumerate(QUESTIONS[:4]):
        conversation = [
            {
                "role": str(index % 2),
                "content": [{"type": "text", "text": answer}, {"type": "audio", "path": clip(index)}],
            }
        ]
        inputs = processor.apply_chat_template(
            conversation,
            tokenize=True,
            return_dict=True,
            output_labels=True,
            text_kwargs={"padding": "max_length", "max_length": 64, "pad_to_multiple_of": 8, "padding_side": "right"},
            audio_kwargs={"sampling_rate": SAMPLE_RATE, "max_length": 12001, "padding": "max_length"},
            common_kwargs={"return_tensors": "pt"},
        )
        keys = ["input_ids", "attention_mask", "labels", "input_values", "input_values_cutoffs"]
        rows.append({key: inputs[key][0] for key in keys})
    return rows


def notebook_arguments(output_dir) -> dict:
    return dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        warmup_steps=5,
        max_steps=1,
        learning_rate=2e-4,
        logging_steps=1,
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir=str(output_dir),
        report_to="none",
    )


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def torch_csm(folder, lora: bool = True):
    from peft import LoraConfig, get_peft_model
    from transformers import CsmForConditionalGeneration

    model = CsmForConditionalGeneration.from_pretrained(str(folder))
    if not lora:
        return model
    config = LoraConfig(r=32, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, bias="none")
    with warnings.catch_warnings():
        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing`.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return get_peft_model(model, config)


def test_trainer_trains_csm_on_mlx_from_transformers_step_zero_loss(csm_folder, tmp_path) -> None:
    from mlx.utils import tree_flatten
    from transformers import Trainer, TrainingArguments

    model, processor = load_notebook_model(csm_folder)
    model = with_notebook_lora(model)
    trainable = [name for name, _ in tree_flatten(model.trainable_parameters())]
    # Seven linears in each layer of the backbone and of the depth decoder, each with lora_a and lora_b.
    assert len(trainable) == len(TARGETS) * 2 * 2 and all(".lora_" in name for name in trainable)
    rows = notebook_rows(processor)
    assert all((row["labels"] == processor.audio_token_id).any() for row in rows)

    trainer = Trainer(model=model, train_dataset=rows, args=TrainingArguments(**notebook_arguments(tmp_path / "mlx")))
    assert isinstance(trainer, UnslothTrainer)
    routed = first_loss(trainer)
    reference = Trainer(
        model=torch_csm(csm_folder),
        train_dataset=rows,
        args=TrainingArguments(**notebook_arguments(tmp_path / "torch"), use_cpu=True),
    )
    expected = first_loss(reference)
    print(f"step-0 loss: MLX {routed:.8f}, Trainer + PEFT {expected:.8f}, gap {abs(routed - expected):.2e}")
    assert abs(routed - expected) <= 1e-4 and expected > 1.0


def test_generate_gives_transformers_frames_and_audio(csm_folder) -> None:
    import torch

    model, processor = load_notebook_model(csm_folder)
    inputs = processor("[0]The kettle is red.", add_special_tokens=True)
    greedy = {"max_new_tokens": 5, "do_sample": False, "depth_decoder_do_sample": False}
    expected = torch_csm(csm_folder, lora=False).generate(**inputs, **greedy)
    actual = model.generate(**inputs, **greedy)
    assert torch.equal(actual, expected) and actual.shape == (1, 5, 4)
    # The notebook's sampling keywords reach both samplers: top-k of one keeps only the greedy pick.
    one = {"do_sample": True, "top_k": 1, "temperature": 0.9, "depth_decoder_do_sample": True, "depth_decoder_top_k": 1}
    assert torch.equal(model.generate(**inputs, max_new_tokens=5, **one), expected)
    with pytest.raises(NotImplementedError, match="does not honour repetition_penalty"):
        model.generate(**inputs, max_new_tokens=5, repetition_penalty=1.1)
    audio = model.generate(**inputs, **greedy, output_audio=True)
    expected_audio = torch_csm(csm_folder, lora=False).generate(**inputs, **greedy, output_audio=True)
    # Mimi's 24 kHz audio, 1920 samples a frame, as the notebook writes it with soundfile.
    assert len(audio) == 1 and audio[0].shape == expected_audio[0].shape == (5 * 1920,)
    assert float((audio[0].to(torch.float32) - expected_audio[0]).abs().max()) <= 1e-4


def test_mlx_audio_s_mimi_gives_transformers_codes_and_audio(csm_folder) -> None:
    import torch

    model, _ = load_notebook_model(csm_folder)
    codec = torch_csm(csm_folder, lora=False).codec_model.eval()
    for samples in (4000, 7200, 12001):
        audio = np.resize(clip(1), samples)
        with torch.no_grad():
            expected = codec.encode(torch.from_numpy(audio)[None, None]).audio_codes[0].T.numpy()
            sound = codec.decode(torch.from_numpy(expected.T)[None]).audio_values[0, 0].numpy()
        codes = model.codec_model.encode(audio)
        assert np.array_equal(codes, expected) and model.codec_model.frames(samples) == len(expected)
        assert np.abs(model.codec_model.decode(codes) - sound).max() <= 1e-4


def test_the_saved_adapter_reloads_into_peft_with_equal_logits(csm_folder, tmp_path) -> None:
    import mlx.core as mx
    import torch
    from mlx.utils import tree_flatten
    from peft import PeftModel

    from unsloth.mlx.speech.csm_training import backbone_states, csm_row

    model, processor = load_notebook_model(csm_folder)
    model = with_notebook_lora(model)
    # Trained-looking adapters: B away from zero, so the reload is checked on weights that change the logits.
    trained = [
        (name, mx.random.normal(value.shape) * 0.05) for name, value in tree_flatten(model.trainable_parameters())
    ]
    model.load_weights([(name, value) for name, value in trained if name.endswith("lora_b")], strict=False)
    model.save_pretrained(str(tmp_path / "sesame_csm_lora"))
    processor.save_pretrained(str(tmp_path / "sesame_csm_lora"))
    row = notebook_rows(processor)[0]
    frames = csm_row({key: value[None] for key, value in row.items()}, model.config, model.codec_model)
    states = backbone_states(model, mx.array(frames.frames[None]), mx.array(frames.kept[None]))
    actual = np.array(model.codebook0_head(states))
    inputs = {key: value[None] for key, value in row.items() if key != "labels"}
    base = torch_csm(csm_folder, lora=False).eval()
    with torch.no_grad():
        before = base(**inputs).logits
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        reloaded = PeftModel.from_pretrained(base, str(tmp_path / "sesame_csm_lora")).eval()
    with torch.no_grad():
        expected = reloaded(**inputs).logits
    length = len(frames.ids)
    gap = float(np.abs(actual[0] - expected[0, :length].numpy()).max())
    print(f"largest logit gap after reload {gap:.2e}")
    assert gap <= 1e-4 and float(np.abs(actual[0] - before[0, :length].numpy()).max()) > 1e-2
    # The same adapters folded into a transformers folder, which loads without PEFT.
    model.save_pretrained_merged(str(tmp_path / "merged"), processor, save_method="merged_32bit")
    again, merged = logits_against(model, processor, tmp_path / "merged")
    merged_gap = float(np.abs(again - merged).max())
    print(f"merged_32bit logits gap {merged_gap:.2e}")
    assert merged_gap <= 1e-3


def logits_against(model, processor, folder) -> tuple:
    """The first codebook's logits of the MLX model and of transformers' CSM loaded from `folder` (CPU, fp32), on
    the first notebook row."""
    import mlx.core as mx
    import torch
    from transformers import AutoProcessor, CsmForConditionalGeneration

    from unsloth.mlx.speech.csm_training import backbone_states, csm_row

    # The processor the folder holds loads; the rows come from the caller's, as the adapter test's do.
    assert type(AutoProcessor.from_pretrained(str(folder))).__name__ == "CsmProcessor"
    row = notebook_rows(processor)[0]
    frames = csm_row({key: value[None] for key, value in row.items()}, model.config, model.codec_model)
    states = backbone_states(model, mx.array(frames.frames[None]), mx.array(frames.kept[None]))
    actual = np.array(model.codebook0_head(states))[0]
    reference = CsmForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = reference(**{key: value[None] for key, value in row.items() if key != "labels"}).logits
    return actual, expected[0, : len(frames.ids)].numpy()


def test_the_notebook_s_cells_run_in_order(csm_folder, tmp_path, monkeypatch) -> None:
    """The notebook's cells after installation, in order, with the tiny folder for `unsloth/csm-1b`, a local dataset
    for `Etherll/kaira` (decoded clips), short runs, and numpy in place of soundfile / IPython (not installed here).
    `bf16=is_bfloat16_supported()` is left out: transformers' own TrainingArguments refuses bf16 on this Linux CPU
    torch, where a Mac's MPS accepts it."""
    import torch
    from datasets import Dataset
    from transformers import AutoProcessor, Trainer, TrainingArguments

    monkeypatch.chdir(tmp_path)
    ran = []
    # Cell: FastModel.from_pretrained(auto_model=CsmForConditionalGeneration), then get_peft_model.
    model, processor = load_notebook_model(csm_folder)
    model = with_notebook_lora(model)
    ran += ["load", "peft"]

    # Cell: data prep, as the notebook writes it (a speaker column added when the dataset has none).
    processor = AutoProcessor.from_pretrained(str(csm_folder))
    raw_ds = Dataset.from_list(
        [
            {"text": answer, "audio": {"array": clip(index), "sampling_rate": SAMPLE_RATE}}
            for index, (_, answer) in enumerate(QUESTIONS[:4])
        ]
    )
    speaker_key = "source"
    raw_ds = raw_ds.add_column("source", ["0"] * len(raw_ds))

    def preprocess_example(example):
        conversation = [
            {
                "role": str(example[speaker_key]),
                "content": [
                    {"type": "text", "text": example["text"]},
                    {"type": "audio", "path": np.asarray(example["audio"]["array"], dtype=np.float32)},
                ],
            }
        ]
        model_inputs = processor.apply_chat_template(
            conversation,
            tokenize=True,
            return_dict=True,
            output_labels=True,
            text_kwargs={"padding": "max_length", "max_length": 64, "pad_to_multiple_of": 8, "padding_side": "right"},
            audio_kwargs={"sampling_rate": 24_000, "max_length": 12001, "padding": "max_length"},
            common_kwargs={"return_tensors": "pt"},
        )
        keys = ["input_ids", "attention_mask", "labels", "input_values", "input_values_cutoffs"]
        return {key: model_inputs[key][0] for key in keys}

    processed_ds = raw_ds.map(preprocess_example, remove_columns=raw_ds.column_names)
    ran.append("data prep")

    # Cells: Trainer, memory stats, train, final stats.
    trainer = Trainer(
        model=model,
        train_dataset=processed_ds,
        args=TrainingArguments(
            per_device_train_batch_size=2,
            gradient_accumulation_steps=1,
            warmup_steps=1,
            max_steps=4,
            learning_rate=2e-3,
            logging_steps=1,
            optim="adamw_8bit",
            weight_decay=0.001,
            lr_scheduler_type="linear",
            seed=3407,
            output_dir="outputs",
            report_to="none",
        ),
    )
    gpu_stats = torch.cuda.get_device_properties(0)
    start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
    trainer_stats = trainer.train()
    used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
    assert gpu_stats.total_memory > 0 and used_memory >= start_gpu_memory >= 0
    assert trainer_stats.metrics["train_runtime"] > 0
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and losses[-1] < losses[0]
    ran += ["trainer", "memory", "train", "stats"]

    # Cells: inference without context, through the chat template, and with an utterance as context.
    inputs = processor("[0]We just finished fine tuning a text to speech model.", add_special_tokens=True).to("cuda")
    audio_values = model.generate(**inputs, max_new_tokens=4, output_audio=True)
    audio = audio_values[0].to(torch.float32).cpu().numpy()
    conversation = [{"role": "0", "content": [{"type": "text", "text": "Sesame is a super cool TTS model."}]}]
    chat_inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True).to("cuda")
    chat_audio = model.generate(**chat_inputs, max_new_tokens=4, output_audio=True)[0].to(torch.float32).cpu().numpy()
    conversation = [
        {"role": "0", "content": [{"type": "text", "text": raw_ds[3]["text"]}, {"type": "audio", "path": clip(3)}]},
        {"role": "0", "content": [{"type": "text", "text": "Sesame is a super cool TTS model."}]},
    ]
    context_inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
    context_audio = model.generate(**context_inputs.to("cuda"), max_new_tokens=4, output_audio=True)[0]
    for sound in (audio, chat_audio, context_audio.numpy()):
        # At most four frames of 1920 samples each: fewer when an all-eos frame ends the speech.
        assert sound.ndim == 1 and len(sound) % 1920 == 0 and len(sound) <= 4 * 1920
    np.save("example_without_context.npy", audio)
    ran += ["inference", "chat inference", "context inference"]

    # Cell: the LoRA save, then the merged save (the notebook's lines are `if False:`, switched on here): a
    # transformers folder with the trained logits, which the four steps moved away from the base's.
    model.save_pretrained("sesame_csm_lora")
    processor.save_pretrained("sesame_csm_lora")
    assert (tmp_path / "sesame_csm_lora" / "adapter_model.safetensors").is_file()
    model.save_pretrained_merged("sesame_csm_finetune_16bit", processor, save_method="merged_16bit")
    actual, merged = logits_against(model, processor, "sesame_csm_finetune_16bit")
    _, base = logits_against(model, processor, csm_folder)
    gap = float(np.abs(actual - merged).max())
    print(f"merged_16bit logits gap {gap:.2e}, trained against base {float(np.abs(actual - base).max()):.2e}")
    assert gap <= 1e-3 and float(np.abs(actual - base).max()) > 1e-2
    ran += ["save", "merged saves"]
    print(f"CSM notebook cells ran: {len(ran)} of 12 after installation ({', '.join(ran)})")


def test_left_padded_rows_and_an_eval_dataset_are_refused_by_name(csm_folder, tmp_path) -> None:
    from transformers import Trainer, TrainingArguments

    from unsloth.mlx.speech.csm_training import csm_row

    model, processor = load_notebook_model(csm_folder)
    rows = notebook_rows(processor)
    row = {key: value[None] for key, value in rows[0].items()}
    # The same row with its padding moved to the left.
    shift = int((row["attention_mask"] == 0).sum())
    textual = ("input_ids", "attention_mask", "labels")
    padded = {key: value.roll(shift, dims=1) if key in textual else value for key, value in row.items()}
    with pytest.raises(NotImplementedError, match="left-padded CSM row.*padding_side='right'"):
        csm_row(padded, model.config, model.codec_model)
    with pytest.raises(NotImplementedError, match="evaluation of a CSM model"):
        Trainer(
            model=model,
            train_dataset=rows,
            eval_dataset=rows,
            args=TrainingArguments(**notebook_arguments(tmp_path), eval_strategy="steps", eval_steps=1),
        )
