"""The Ministral 3 VL (3B) Vision notebook's calls, in its order, on a tiny Mistral 3 (mlx-vlm's `mistral3`: a
Pixtral tower, a 2x2 patch merger) under its Hub id: `FastVisionModel` in 16 bits, LoRA on both towers, LaTeX OCR
conversations, generation before and after `SFTTrainer` with `UnslothVisionDataCollator` (bf16 as
`is_bf16_supported()` says, TensorBoard logs), then the adapter saved.

Cell titles give the notebook's code-cell number. LaTeX_OCR comes from a local Parquet file of coloured squares
in its columns (`image`, `text`); training runs a few steps. The IPython formula display is not run (no IPython).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/Ministral-3-3B-Instruct-2512": "ministral3"}, rows=8)
STEPS = 3

# %% [1] FastVisionModel by Hub id, 16-bit
from unsloth import FastVisionModel  # noqa: E402

ministral_models = [
    "unsloth/Ministral-3-3B-Instruct-2512",
    "unsloth/Ministral-3-8B-Instruct-2512",
    "unsloth/Ministral-3-3B-Reasoning-2512",
    "unsloth/Ministral-3-3B-Base-2512",
]
model, tokenizer = FastVisionModel.from_pretrained(
    "unsloth/Ministral-3-3B-Instruct-2512",
    load_in_4bit=False,
    use_gradient_checkpointing="unsloth",
)

# %% [1] the notebook's `import torch` (its own cell here: the memory cells need torch, the rest does not)
import torch  # noqa: E402, F401

# %% [2] LoRA on the vision and the language layers
model = FastVisionModel.get_peft_model(
    model,
    finetune_vision_layers=True,
    finetune_language_layers=True,
    finetune_attention_modules=True,
    finetune_mlp_modules=True,
    r=32,
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/LaTeX_OCR"], split="train")

# %% [4] the dataset's summary
print(dataset)

# %% [5] one image
print(dataset[2]["image"])

# %% [6] its text
print(dataset[2]["text"])

# %% [7] the formula shown through IPython (not run here: no IPython)

# %% [8] rows as conversations with an image part
instruction = "Write the LaTeX representation for this image."


def convert_to_conversation(sample):
    conversation = [
        {
            "role": "user",
            "content": [{"type": "text", "text": instruction}, {"type": "image", "image": sample["image"]}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": sample["text"]}]},
    ]
    return {"messages": conversation}


# %% [9] the converted dataset
converted_dataset = [convert_to_conversation(sample) for sample in dataset]

# %% [10] one converted row
print(converted_dataset[0])


# %% [11] generation before training: the processor called with the image, moved to "cuda"
def ask_about(image):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
    input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    inputs = tokenizer(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")

    from transformers import TextStreamer

    text_streamer = TextStreamer(tokenizer, skip_prompt=True)
    _ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=16, use_cache=True, temperature=1.5, min_p=0.1)


FastVisionModel.for_inference(model)
ask_about(dataset[2]["image"])

# %% [12] SFTTrainer with the vision collator, four rows per batch, bf16 where supported, TensorBoard logs
from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402
from trl import SFTTrainer, SFTConfig  # noqa: E402
from unsloth import is_bf16_supported  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    data_collator=UnslothVisionDataCollator(model, tokenizer),
    train_dataset=converted_dataset,
    args=SFTConfig(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        warmup_steps=1,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="adamw_8bit",
        fp16=not is_bf16_supported(),
        bf16=is_bf16_supported(),
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="tensorboard",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=2048,
    ),
)

# %% [13] memory stats before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")
print(f"{start_gpu_memory} GB of memory reserved.")

# %% [14] train
trainer_stats = trainer.train()

# %% [15] memory and time stats after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
used_memory_for_lora = round(used_memory - start_gpu_memory, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"{round(trainer_stats.metrics['train_runtime'] / 60, 2)} minutes used for training.")
print(f"Peak reserved memory = {used_memory} GB.")
print(f"Peak reserved memory for training % of max memory = {round(used_memory_for_lora / max_memory * 100, 3)} %.")

# %% [16] generation after training
FastVisionModel.for_inference(model)
ask_about(dataset[2]["image"])

# %% [17] the adapter saved
model.save_pretrained("ministral_lora")
tokenizer.save_pretrained("ministral_lora")

# %% [18] generation on another row (the reload is behind `if False`, as in the notebook)
if False:
    model, tokenizer = FastVisionModel.from_pretrained(model_name="ministral_lora", load_in_4bit=True)
    FastVisionModel.for_inference(model)
ask_about(dataset[0]["image"])

# %% [19] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)

# %% [20] GGUF saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_gguf("ministral_finetune", tokenizer)
