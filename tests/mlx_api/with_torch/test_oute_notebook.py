"""Issue 49 item 1: the Oute TTS notebook's cells on a tiny llama whose vocabulary holds OuteTTS's markers and DAC's two
codebooks as `<|c1_N|>` / `<|c2_N|>`: `FastModel` with LoRA on `q_proj`/`v_proj`, TRL's `SFTTrainer` over prompt
strings, and the inference cell's sampling settings (min_p and repetition penalty included) on MLX. The data cell's
DAC and OuteTTS interface come from a pip install and a git clone, so it is refused by name."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from unsloth import FastModel

CODES = 32
MARKERS = ["<|im_start|>", "<|im_end|>", "<|text_start|>", "<|text_end|>", "<|audio_start|>", "<|audio_end|>"]
MARKERS += ["<|global_features_start|>", "<|global_features_end|>"]


@pytest.fixture(scope="module")
def oute_folder(tiny_model_dir, tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": MARKERS})
    tokenizer.add_tokens([f"<|c{book}_{code}|>" for book in (1, 2) for code in range(CODES)])
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.config.max_position_embeddings = 2048
    folder = tmp_path_factory.mktemp("oute") / "Llama-OuteTTS-1.0-1B"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def oute_rows() -> list:
    """Training prompts in OuteTTS's v3 layout; seeded codes stand in for DAC's (a pip install and a git clone)."""
    generator = np.random.default_rng(3407)
    rows = []
    for index, text in enumerate(["The kettle is red.", "Rain fell all day.", "We met at noon.", "Hello."] * 2):
        frames = "".join(f"<|c1_{a}|><|c2_{b}|>" for a, b in generator.integers(0, CODES, (8 + 2 * index, 2)).tolist())
        text_part = f"<|text_start|>{text}<|text_end|>"
        rows.append({"text": "\n".join(["<|im_start|>", text_part, f"<|audio_start|>{frames}<|audio_end|>"])})
    return rows


def test_the_oute_cells_train_and_sample_audio_tokens_on_mlx(oute_folder, tmp_path):
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    model, tokenizer = FastModel.from_pretrained(
        model_name=str(oute_folder), max_seq_length=2048, dtype=None, load_in_4bit=False
    )
    model = FastModel.get_peft_model(
        model,
        r=128,
        target_modules=["q_proj", "v_proj"],
        lora_alpha=128,
        lora_dropout=0,
        bias="none",
        use_gradient_checkpointing="unsloth",
        random_state=3407,
        use_rslora=False,
        loftq_config=None,
    )
    # The data cell's first network-only import.
    with pytest.raises(ModuleNotFoundError, match=r"'dac'.*pip install descript-audio-codec"):
        import dac  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"outetts.*git clone https://github.com/edwko/OuteTTS"):
        from outetts.dac.interface import DacInterface  # noqa: F401

    trainer = SFTTrainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=datasets.Dataset.from_list(oute_rows()),
        dataset_text_field="text",
        max_seq_length=2048,
        packing=False,
        args=SFTConfig(
            per_device_train_batch_size=2,
            gradient_accumulation_steps=4,
            warmup_steps=5,
            max_steps=1,
            learning_rate=2e-4,
            logging_steps=1,
            optim="adamw_8bit",
            weight_decay=0.001,
            lr_scheduler_type="linear",
            seed=3407,
            output_dir=str(tmp_path / "outputs"),
            report_to="none",
        ),
    )
    stats = trainer.train()
    loss = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
    assert stats.metrics["train_runtime"] > 0 and math.isclose(loss, math.log(len(tokenizer)), rel_tol=0.2)

    # The inference cell's generation, with its sampling settings.
    FastModel.for_inference(model)
    prompt = "\n".join(
        ["<|im_start|>", "<|text_start|>Hello there.<|text_end|>", "<|audio_start|><|global_features_start|>"]
    )
    with torch.inference_mode():
        # torch's CPU build only warns that CUDA autocast is off; the cell runs on.
        with pytest.warns(UserWarning, match="Disabling autocast"), torch.amp.autocast("cuda", dtype=model.dtype):
            model_inputs = tokenizer([prompt], return_tensors="pt").to("cuda")
            generated_ids = model.generate(
                **model_inputs,
                temperature=0.4,
                top_k=40,
                top_p=0.9,
                repetition_penalty=1.1,
                min_p=0.05,
                max_new_tokens=24,
            )
    assert torch.equal(generated_ids[:, : model_inputs.input_ids.shape[1]], model_inputs.input_ids)
    assert generated_ids.shape[1] > model_inputs.input_ids.shape[1]
    decoded_output = tokenizer.batch_decode(generated_ids, skip_special_tokens=False)[0]
    assert all(int(code) < CODES for code in re.findall(r"<\|c[12]_(\d+)\|>", decoded_output))

    model.save_pretrained(str(tmp_path / "oute_tts_lora"))
    tokenizer.save_pretrained(str(tmp_path / "oute_tts_lora"))
    assert (tmp_path / "oute_tts_lora" / "adapter_config.json").is_file()
