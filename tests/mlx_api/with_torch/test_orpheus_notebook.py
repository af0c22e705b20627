"""Issue 49 item 1: the Orpheus text-to-speech notebook's cells on a tiny llama whose vocabulary holds SNAC's audio
codes, with a tiny random SNAC (`snac` 1.2.1) built offline: the codec moved with `.to("cuda")` encodes the clips,
transformers' `Trainer` trains the model on MLX with the step-0 loss of transformers' `Trainer` with PEFT on CPU
torch, and the notebook's generation and decoding cells run."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from unsloth import FastLanguageModel, UnslothTrainer

from ..conftest import QUESTIONS

# Each of the three SNAC codebooks holds this many codes (4096 in the 24 kHz checkpoint); a frame is 7 tokens.
CODEBOOK_SIZE = 64
FRAME_TOKENS = 7
SAMPLE_RATE = 24000
# The notebook's special tokens sit just past the text vocabulary, the audio codes 10 past it.
SPECIALS = 10
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def snac_class() -> type:
    """`snac.SNAC`; its import scripts a function with `torch.jit.script`, which torch 2.13 deprecates."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        from snac import SNAC
    return SNAC


@pytest.fixture(scope="module")
def orpheus_folder(tiny_model_dir, tmp_path_factory):
    """The tiny llama with Orpheus's vocabulary layout: its text tokens, then 10 specials, then 7 x 64 audio codes."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    text_length = len(tokenizer)
    tokenizer.add_tokens([f"<custom_token_{index}>" for index in range(SPECIALS + FRAME_TOKENS * CODEBOOK_SIZE)])
    model = LlamaForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    # Orpheus covers the notebook's max_seq_length=2048 (shorter, the loader would stretch RoPE, as CUDA Unsloth does).
    model.config.max_position_embeddings = 2048
    folder = tmp_path_factory.mktemp("orpheus") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, text_length


@pytest.fixture(scope="module")
def snac_folder(tmp_path_factory):
    """A tiny random 24 kHz SNAC saved as the Hub's checkpoint is (config.json and pytorch_model.bin)."""
    import torch

    torch.manual_seed(0)
    config = {
        "sampling_rate": SAMPLE_RATE,
        "encoder_dim": 4,
        "encoder_rates": [2, 4, 8, 8],
        "decoder_dim": 32,
        "decoder_rates": [8, 8, 4, 2],
        "attn_window_size": None,
        "codebook_size": CODEBOOK_SIZE,
        "codebook_dim": 8,
        "vq_strides": [4, 2, 1],
        "noise": True,
        "depthwise": True,
    }
    folder = tmp_path_factory.mktemp("snac")
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.save(snac_class()(**config).state_dict(), folder / "pytorch_model.bin")
    return folder


def clip(seconds: float, pitch: float) -> np.ndarray:
    times = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * pitch * times)).astype(np.float32)


def audio_codes(snac_model, waveform: np.ndarray, audio_start: int) -> list:
    """The notebook's `tokenise_audio`: SNAC's three codebooks interleaved 7 to a frame, each at its own offset."""
    import torch

    batch = torch.from_numpy(waveform).unsqueeze(0).to(dtype=torch.float32).unsqueeze(0).to("cuda")
    with torch.inference_mode():
        codes = snac_model.encode(batch)
    frames = []
    for i in range(codes[0].shape[1]):
        picks = [codes[0][0][i], codes[1][0][2 * i], codes[2][0][4 * i], codes[2][0][4 * i + 1]]
        picks += [codes[1][0][2 * i + 1], codes[2][0][4 * i + 2], codes[2][0][4 * i + 3]]
        frames += [pick.item() + audio_start + slot * CODEBOOK_SIZE for slot, pick in enumerate(picks)]
    return frames


def orpheus_rows(tokenizer, text_length: int, snac_model) -> list:
    """The notebook's `create_input_ids`: human turn (text), then the AI turn holding the speech codes."""
    start_of_speech, end_of_speech = text_length + 1, text_length + 2
    start_of_human, end_of_human = text_length + 3, text_length + 4
    start_of_ai, end_of_ai = text_length + 5, text_length + 6
    rows = []
    for index, (_, answer) in enumerate(QUESTIONS[:4]):
        codes = audio_codes(snac_model, clip(0.5 + 0.25 * index, 220.0 * (index + 1)), text_length + SPECIALS)
        text = tokenizer.encode(answer, add_special_tokens=True) + [tokenizer.eos_token_id]
        ids = [start_of_human, *text, end_of_human, start_of_ai, start_of_speech, *codes, end_of_speech, end_of_ai]
        rows.append({"input_ids": ids, "labels": ids, "attention_mask": [1] * len(ids)})
    return rows


def notebook_arguments(output_dir) -> dict:
    return dict(
        per_device_train_batch_size=1,
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


def torch_step_zero_loss(folder, rows: list, output_dir) -> float:
    """transformers' Trainer with PEFT's LoRA on the same checkpoint and rows, on CPU torch."""
    import datasets
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS, bias="none")
    with warnings.catch_warnings():
        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing`.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        peft_model = get_peft_model(model, config)
    trainer = Trainer(
        model=peft_model,
        train_dataset=datasets.Dataset.from_list(rows),
        args=TrainingArguments(**notebook_arguments(output_dir), optim="adamw_torch", use_cpu=True),
    )
    return first_loss(trainer)


def test_the_orpheus_cells_train_on_mlx_with_transformers_step_zero_loss(orpheus_folder, snac_folder, tmp_path):
    import datasets
    import torch
    from transformers import Trainer, TrainingArguments

    folder, text_length = orpheus_folder
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(folder), max_seq_length=2048, dtype=None, load_in_4bit=False
    )
    model = FastLanguageModel.get_peft_model(
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
    )
    snac_model = snac_class().from_pretrained(str(snac_folder))
    snac_model = snac_model.to("cuda")
    assert next(snac_model.parameters()).device.type == "cpu"
    rows = orpheus_rows(tokenizer, text_length, snac_model)
    assert all(len(row["input_ids"]) > 40 for row in rows)
    audio_ids = [token for row in rows for token in row["input_ids"] if token >= text_length + SPECIALS]
    assert max(audio_ids) < len(tokenizer) and len(set(audio_ids)) > FRAME_TOKENS

    trainer = Trainer(
        model=model,
        train_dataset=datasets.Dataset.from_list(rows),
        args=TrainingArguments(**notebook_arguments(tmp_path / "mlx"), optim="adamw_8bit"),
    )
    assert isinstance(trainer, UnslothTrainer)
    # The memory cells around training read torch.cuda, answered from MLX.
    total_memory = torch.cuda.get_device_properties(0).total_memory
    routed = first_loss(trainer)
    assert total_memory > 0 and torch.cuda.max_memory_reserved() >= 0
    expected = torch_step_zero_loss(folder, rows, tmp_path / "torch")
    print(f"step-0 loss: MLX {routed:.6f}, transformers + PEFT {expected:.6f}")
    assert abs(routed - expected) <= 1e-4
    # A random model over this vocabulary: the loss is near ln(vocabulary), so real rows reached both trainers.
    assert math.isclose(expected, math.log(len(tokenizer)), rel_tol=0.2)

    # The inference cell: the codec back on the CPU, a left-padded torch prompt, the notebook's sampling settings.
    FastLanguageModel.for_inference(model)
    snac_model.to("cpu")
    prompt = tokenizer("The kettle is red.", return_tensors="pt").input_ids
    start, end = torch.tensor([[text_length + 3]]), torch.tensor([[tokenizer.eos_token_id, text_length + 4]])
    input_ids = torch.cat([torch.full((1, 2), text_length + 7), torch.cat([start, prompt, end], dim=1)], dim=1)
    attention_mask = (input_ids != text_length + 7).long()
    generated_ids = model.generate(
        input_ids=input_ids.to("cuda"),
        attention_mask=attention_mask.to("cuda"),
        max_new_tokens=21,
        do_sample=True,
        temperature=0.6,
        top_p=0.95,
        repetition_penalty=1.1,
        num_return_sequences=1,
        eos_token_id=text_length + 2,
        use_cache=True,
    )
    assert isinstance(generated_ids, torch.Tensor) and torch.equal(generated_ids[:, : input_ids.shape[1]], input_ids)
    (generated_ids == text_length + 1).nonzero(as_tuple=True)

    # The decoding cell's `redistribute_codes`, on a training row's codes: SNAC gives back the clip's length.
    codes = [token - text_length - SPECIALS for token in rows[0]["input_ids"] if token >= text_length + SPECIALS]
    layers = [[], [], []]
    for i in range(len(codes) // FRAME_TOKENS):
        frame = codes[FRAME_TOKENS * i : FRAME_TOKENS * (i + 1)]
        for slot, layer in enumerate((0, 1, 2, 2, 1, 2, 2)):
            layers[layer].append(frame[slot] - slot * CODEBOOK_SIZE)
    audio = snac_model.decode([torch.tensor(layer).unsqueeze(0) for layer in layers])
    assert audio.shape[-1] >= len(clip(0.5, 220.0)) and torch.isfinite(audio).all()

    # The saving cell: the LoRA adapter and the tokenizer, as transformers' PEFT folder holds them.
    model.save_pretrained(str(tmp_path / "orpheus_lora"))
    tokenizer.save_pretrained(str(tmp_path / "orpheus_lora"))
    saved = json.loads((tmp_path / "orpheus_lora" / "adapter_config.json").read_text(encoding="utf-8"))
    assert sorted(saved["target_modules"]) == sorted(TARGETS) and saved["r"] == 8
