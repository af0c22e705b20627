"""Issue 49 item 1: the Llasa TTS notebook's cells on a tiny llama whose vocabulary holds Llasa's markers and XCodec2's
speech tokens: `FastLanguageModel` with LoRA on `q_proj`/`v_proj`, transformers' `Trainer` over the notebook's torch
`Dataset` of padded tensor rows trains on MLX with the step-0 loss of transformers' `Trainer` with PEFT on CPU torch,
and the inference cell samples speech tokens with the notebook's settings. XCodec2 needs a download, so its cell is
refused by name."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from unsloth import FastLanguageModel, UnslothTrainer

SPEECH_CODES = 64
MAX_LENGTH = 256
MARKERS = [
    "<|TEXT_UNDERSTANDING_START|>",
    "<|TEXT_UNDERSTANDING_END|>",
    "<|SPEECH_GENERATION_START|>",
    "<|SPEECH_GENERATION_END|>",
]
HEADERS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# Llama 3's chat layout, which Llasa's tokenizer carries.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
)
TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def llasa_folder(tiny_model_dir, tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    # The plain tiny llama, as Orpheus's test uses (see docs/mlx-speech.md on the llama3 rope-scaled one).
    base = tiny_model_dir
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_special_tokens({"additional_special_tokens": MARKERS + HEADERS})
    tokenizer.add_tokens([f"<|s_{code}|>" for code in range(SPEECH_CODES)])
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.config.max_position_embeddings = 2048
    folder = tmp_path_factory.mktemp("llasa") / "Llasa-1B"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def llasa_dataset(tokenizer):
    """The notebook's `MemmapTTSDataset` rows: chat-templated text then speech, labels from the speech start, padded
    to the notebook's length; seeded codes stand in for XCodec2's (a download)."""
    import torch

    speech_start, speech_end = (tokenizer.convert_tokens_to_ids(marker) for marker in MARKERS[2:])
    generator = np.random.default_rng(3407)
    rows = []
    for index, text in enumerate(["The kettle is red.", "Rain fell all day.", "We met at noon.", "Hello."] * 2):
        text_ids = tokenizer.encode(f"{MARKERS[0]}{text}{MARKERS[1]}", add_special_tokens=False)
        codes = generator.integers(0, SPEECH_CODES, 10 + 4 * index)
        speech_ids = [speech_start, *tokenizer.convert_tokens_to_ids([f"<|s_{c}|>" for c in codes]), speech_end]
        chat = [
            {"role": "user", "content": f"Convert the text to speech:{MARKERS[0]}"},
            {"role": "assistant", "content": MARKERS[2]},
        ]
        templated = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=False)
        templated = list(templated["input_ids"] if hasattr(templated, "keys") else templated)
        at = templated.index(tokenizer.convert_tokens_to_ids(MARKERS[0]))
        templated = templated[:at] + text_ids + templated[at + 1 :]
        at = templated.index(speech_start)
        input_ids = torch.tensor(templated[:at] + speech_ids + templated[at + 1 :])
        labels = torch.full_like(input_ids, -100)
        labels[at:] = input_ids[at:]
        pad = MAX_LENGTH - len(input_ids)
        rows.append(
            {
                "input_ids": torch.cat([input_ids, torch.full((pad,), tokenizer.pad_token_id)]),
                "labels": torch.cat([labels, torch.full((pad,), -100)]),
                "attention_mask": torch.cat([torch.ones_like(input_ids), torch.zeros(pad, dtype=torch.long)]),
            }
        )

    class MemmapTTSDataset(torch.utils.data.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, index):
            return rows[index]

    return MemmapTTSDataset()


def notebook_arguments(output_dir, **overrides) -> dict:
    notebook = dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        warmup_steps=5,
        max_steps=1,
        learning_rate=5e-4,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir=str(output_dir),
        report_to="none",
    )
    return {**notebook, **overrides}


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def torch_step_zero_loss(folder, dataset, output_dir) -> float:
    """transformers' Trainer with PEFT's LoRA on the same checkpoint and rows, on CPU torch."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    config = LoraConfig(r=128, lora_alpha=128, lora_dropout=0.0, target_modules=TARGETS, bias="none")
    with warnings.catch_warnings():
        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing`.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        peft_model = get_peft_model(model, config)
    arguments = TrainingArguments(**notebook_arguments(output_dir, optim="adamw_torch", use_cpu=True))
    return first_loss(Trainer(model=peft_model, train_dataset=dataset, args=arguments))


def test_the_llasa_cells_train_on_mlx_with_transformers_step_zero_loss(llasa_folder, tmp_path):
    import torch
    from transformers import Trainer, TrainingArguments

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(llasa_folder), max_seq_length=2048, dtype=None, load_in_4bit=False
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=128,
        target_modules=TARGETS,
        lora_alpha=128,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing="unsloth",
        random_state=3407,
        use_rslora=False,
        loftq_config=None,
    )
    # The preprocessing cell imports XCodec2, a download this machine has no network for.
    with pytest.raises(ModuleNotFoundError, match=r"xcodec2.*pip install xcodec2==0\.1\.5"):
        from xcodec2.modeling_xcodec2 import XCodec2Model  # noqa: F401

    train_dataset = llasa_dataset(tokenizer)
    trainer = Trainer(model=model, train_dataset=train_dataset, args=TrainingArguments(**notebook_arguments(tmp_path)))
    assert isinstance(trainer, UnslothTrainer)
    routed = first_loss(trainer)
    expected = torch_step_zero_loss(llasa_folder, train_dataset, tmp_path / "torch")
    print(f"step-0 loss: MLX {routed:.6f}, transformers + PEFT {expected:.6f}")
    assert abs(routed - expected) <= 1e-4
    assert math.isclose(expected, math.log(len(tokenizer)), rel_tol=0.2)

    # The inference cell, with its sampling settings (top_p above 1 leaves nucleus sampling off, as in transformers).
    FastLanguageModel.for_inference(model)
    with torch.inference_mode():
        formatted_text = "<|TEXT_UNDERSTANDING_START|>Hello there.<|TEXT_UNDERSTANDING_END|>"
        chat = [
            {"role": "user", "content": "Convert the text to speech:" + formatted_text},
            {"role": "assistant", "content": "<|SPEECH_GENERATION_START|>"},
        ]
        input_ids = tokenizer.apply_chat_template(chat, tokenize=True, return_tensors="pt", continue_final_message=True)
        input_ids = getattr(input_ids, "input_ids", input_ids).to("cuda")
        speech_end_id = tokenizer.convert_tokens_to_ids("<|SPEECH_GENERATION_END|>")
        outputs = model.generate(
            input_ids,
            max_length=input_ids.shape[1] + 24,
            eos_token_id=speech_end_id,
            do_sample=True,
            top_p=1.2,
            temperature=1.2,
        )
    assert torch.equal(outputs[:, : input_ids.shape[1]], input_ids) and outputs.shape[1] > input_ids.shape[1]
    generated_ids = outputs[0][input_ids.shape[1] : -1]
    assert isinstance(tokenizer.batch_decode(generated_ids, skip_special_tokens=True), list)

    # The saving cell.
    model.save_pretrained(str(tmp_path / "llasa_tts_lora"))
    tokenizer.save_pretrained(str(tmp_path / "llasa_tts_lora"))
    assert (tmp_path / "llasa_tts_lora" / "adapter_config.json").is_file()
