"""Issue 49 item 1: the Spark TTS notebook's cells on a tiny qwen2 laid out as Spark's `LLM` folder, its vocabulary
holding BiCodec's global and semantic tokens: `FastModel(full_finetuning=True)` loads it, `get_peft_model` leaves it
fully trainable as on CUDA, TRL's `SFTTrainer` trains every weight on MLX with the step-0 loss of TRL's `SFTTrainer`
on CPU torch, and the inference cell samples audio tokens with the notebook's settings. BiCodec itself comes from
SparkAudio's git clone, so its cells are refused by name."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

from unsloth import FastModel

GLOBAL_CODES = 16
SEMANTIC_CODES = 64
# BiCodec's speaker projection takes exactly this many global tokens (32 in the released codec).
GLOBAL_TOKENS = 8
SPECIALS = [
    "<|task_tts|>",
    "<|start_content|>",
    "<|end_content|>",
    "<|start_global_token|>",
    "<|end_global_token|>",
    "<|start_semantic_token|>",
    "<|end_semantic_token|>",
    "<|im_end|>",
]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def spark_folder(tmp_path_factory):
    """`Spark-TTS-0.5B/LLM`: a tiny qwen2 whose vocabulary adds Spark's task tokens and BiCodec's codes."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    root = tmp_path_factory.mktemp("spark")
    base = build_tiny_mlx_model(root / "base", architecture="qwen2", tokenizer_cache_dir=root / "tokenizers")
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": SPECIALS})
    tokenizer.add_tokens([f"<|bicodec_global_{index}|>" for index in range(GLOBAL_CODES)])
    tokenizer.add_tokens([f"<|bicodec_semantic_{index}|>" for index in range(SEMANTIC_CODES)])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.config.max_position_embeddings = 2048
    folder = root / "Spark-TTS-0.5B"
    model.save_pretrained(folder / "LLM")
    tokenizer.save_pretrained(folder / "LLM")
    return folder


def spark_rows() -> list:
    """The notebook's `formatting_audio_func` text layout; seeded codes stand in for BiCodec's (a git clone)."""
    generator = np.random.default_rng(3407)
    rows = []
    for index, text in enumerate(["The kettle is red.", "Rain fell all day.", "We met at noon."] * 3):
        global_ids = generator.integers(0, GLOBAL_CODES, GLOBAL_TOKENS)
        semantic_ids = generator.integers(0, SEMANTIC_CODES, 12 + 3 * index)
        inputs = [
            "<|task_tts|>",
            "<|start_content|>",
            text,
            "<|end_content|>",
            "<|start_global_token|>",
            "".join(f"<|bicodec_global_{i}|>" for i in global_ids),
            "<|end_global_token|>",
            "<|start_semantic_token|>",
            "".join(f"<|bicodec_semantic_{i}|>" for i in semantic_ids),
            "<|end_semantic_token|>",
            "<|im_end|>",
        ]
        rows.append({"text": "".join(inputs)})
    return rows


def notebook_config(config_class, output_dir, **overrides):
    """The notebook's `SFTConfig`, one step long."""
    notebook = dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        warmup_steps=5,
        max_steps=1,
        learning_rate=2e-4,
        fp16=False,
        bf16=False,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir=str(output_dir),
        report_to="none",
        dataset_text_field="text",
        max_length=2048,
        packing=False,
    )
    return config_class(**{**notebook, **overrides})


def weights(folder) -> dict:
    from safetensors.numpy import load_file

    return {name: value for path in sorted(folder.glob("*.safetensors")) for name, value in load_file(path).items()}


def first_loss(trainer) -> float:
    trainer.train()
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def torch_step_zero_loss(folder, rows: list, output_dir) -> float:
    """TRL's `SFTTrainer` fine-tuning every weight of the same checkpoint on the same rows, on CPU torch."""
    import datasets
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    # `trl.SFTTrainer` and `trl.SFTConfig` are routed to MLX here; TRL's own classes stay in their modules.
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    model = Qwen2ForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with warnings.catch_warnings():
        # TRL 1.x's own config sets transformers' deprecated `gradient_checkpointing`.
        warnings.filterwarnings("ignore", "`gradient_checkpointing` is deprecated", FutureWarning)
        config = notebook_config(SFTConfig, output_dir, optim="adamw_torch", use_cpu=True)
    trainer = SFTTrainer(
        model=model,
        processing_class=AutoTokenizer.from_pretrained(str(folder)),
        train_dataset=datasets.Dataset.from_list(rows),
        args=config,
    )
    return first_loss(trainer)


def test_the_spark_cells_fully_finetune_on_mlx_with_trls_step_zero_loss(spark_folder, tmp_path, capsys):
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    model, tokenizer = FastModel.from_pretrained(
        model_name=f"{spark_folder}/LLM",
        max_seq_length=2048,
        dtype=torch.float32,
        full_finetuning=True,
        load_in_4bit=False,
    )
    model = FastModel.get_peft_model(
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
    assert "Full finetuning is enabled, so .get_peft_model has no effect" in capsys.readouterr().out

    # The tokenization cell imports BiCodec from SparkAudio's clone, which this machine has no network to make.
    with pytest.raises(ModuleNotFoundError, match=r"sparktts.*git clone https://github.com/SparkAudio/Spark-TTS"):
        from sparktts.models.audio_tokenizer import BiCodecTokenizer  # noqa: F401

    rows = spark_rows()
    trainer = SFTTrainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=datasets.Dataset.from_list(rows),
        dataset_text_field="text",
        max_seq_length=2048,
        packing=False,
        args=notebook_config(SFTConfig, tmp_path / "mlx", max_steps=2),
    )
    routed = first_loss(trainer)
    expected = torch_step_zero_loss(spark_folder / "LLM", rows, tmp_path / "torch")
    print(f"step-0 loss: MLX {routed:.6f}, TRL SFTTrainer full fine-tune {expected:.6f}")
    assert abs(routed - expected) <= 1e-4
    assert math.isclose(expected, math.log(len(tokenizer)), rel_tol=0.2)

    # The inference cell's generation, with its sampling settings; its regexes find BiCodec's tokens in the text.
    FastModel.for_inference(model)
    prompt = "".join(["<|task_tts|>", "<|start_content|>", "Hello.", "<|end_content|>", "<|start_global_token|>"])
    model_inputs = tokenizer([prompt], return_tensors="pt").to("cpu")
    torch.compiler.reset()
    generated_ids = model.generate(
        **model_inputs,
        max_new_tokens=24,
        do_sample=True,
        temperature=0.8,
        top_k=50,
        top_p=1,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    assert torch.equal(generated_ids[:, : model_inputs.input_ids.shape[1]], model_inputs.input_ids)
    predicts_text = tokenizer.batch_decode(generated_ids[:, model_inputs.input_ids.shape[1] :])[0]
    found = re.findall(r"<\|bicodec_(?:global|semantic)_(\d+)\|>", predicts_text)
    assert generated_ids.shape[1] > model_inputs.input_ids.shape[1] and all(int(i) < SEMANTIC_CODES for i in found)

    # The saving cell: a full fine-tune saves the whole model, its weights moved by step 2 (step 1's rate is 0).
    model.save_pretrained(str(tmp_path / "spark_tts_lora"))
    tokenizer.save_pretrained(str(tmp_path / "spark_tts_lora"))
    before, after = weights(spark_folder / "LLM"), weights(tmp_path / "spark_tts_lora")
    assert sorted(before) == sorted(after)
    moved = [name for name in before if not np.array_equal(before[name], after[name])]
    assert "model.embed_tokens.weight" in moved and "model.layers.0.self_attn.q_proj.weight" in moved
