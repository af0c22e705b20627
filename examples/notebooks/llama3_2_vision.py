"""The Llama 3.2 (11B) Vision notebook's calls, in its order, on a tiny Llama 3.2 Vision (mlx-vlm's `mllama`:
cross-attention layers reading a vision tower) under its Hub id: `FastVisionModel` in 4 bits, LoRA on both towers,
Radiology_mini conversations, generation before and after `SFTTrainer` with `UnslothVisionDataCollator`, then the
adapter saved.

Cell titles give the notebook's code-cell number. Radiology_mini comes from a local Parquet file of coloured squares
in its columns (`image`, `caption`). The notebook trains two rows per batch, which mlx-vlm's `mllama` call cannot
take at once (it keeps only the first row's images), so the trainer runs each row as its own call and combines them
as one batch.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/Llama-3.2-11B-Vision-Instruct": "mllama"})
STEPS = 3

# %% [1] FastVisionModel by Hub id, 4-bit
from unsloth import FastVisionModel  # noqa: E402

model, tokenizer = FastVisionModel.from_pretrained(
    "unsloth/Llama-3.2-11B-Vision-Instruct",
    load_in_4bit=True,
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
    r=16,
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/Radiology_mini"], split="train")

# %% [4] the dataset's summary
print(dataset)

# %% [5] one image
print(dataset[0]["image"])

# %% [6] its caption
print(dataset[0]["caption"])

# %% [7] rows as conversations with an image part
instruction = "You are an expert radiographer. Describe accurately what you see in this image."


def convert_to_conversation(sample):
    conversation = [
        {
            "role": "user",
            "content": [{"type": "text", "text": instruction}, {"type": "image", "image": sample["image"]}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": sample["caption"]}]},
    ]
    return {"messages": conversation}


# %% [8] the converted dataset
converted_dataset = [convert_to_conversation(sample) for sample in dataset]

# %% [9] one converted row
print(converted_dataset[0])


# %% [10] generation before training: the processor called with the image, moved to "cuda"
def ask_about(image):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
    input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    inputs = tokenizer(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")

    from transformers import TextStreamer

    text_streamer = TextStreamer(tokenizer, skip_prompt=True)
    _ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=16, use_cache=True, temperature=1.5, min_p=0.1)


FastVisionModel.for_inference(model)
ask_about(dataset[0]["image"])

# %% [11] SFTTrainer with the vision collator and the notebook's two rows per batch
from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402
from trl import SFTTrainer, SFTConfig  # noqa: E402

FastVisionModel.for_training(model)

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    data_collator=UnslothVisionDataCollator(model, tokenizer),
    train_dataset=converted_dataset,
    args=SFTConfig(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        warmup_steps=1,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=2048,
    ),
)

# %% [12] memory stats before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [13] train
trainer_stats = trainer.train()

# %% [14] memory and time stats after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [15] generation after training
FastVisionModel.for_inference(model)
ask_about(dataset[0]["image"])

# %% [16] the adapter saved
model.save_pretrained("llama_lora")
tokenizer.save_pretrained("llama_lora")

# %% [17] generation again (the reload is behind `if False`, as in the notebook)
if False:
    model, tokenizer = FastVisionModel.from_pretrained(model_name="llama_lora", load_in_4bit=True)
    FastVisionModel.for_inference(model)
ask_about(dataset[0]["image"])

# %% [18] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)
