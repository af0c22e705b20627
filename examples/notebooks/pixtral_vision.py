"""The Pixtral (12B) Vision notebook's calls, in its order, on a tiny Pixtral (mlx-vlm's `pixtral`, stored as the
Hub ships it: `model_type: llava` with a `pixtral` vision config) under its Hub id: `FastVisionModel` in 4 bits, LoRA
on the MLP and vision layers without attention, llava-instruct-mix rows (`messages` and `images`) straight into
`SFTTrainer` with `UnslothVisionDataCollator(resize=512)`, generation, then the adapter saved.

Cell titles give the notebook's code-cell number. The dataset comes from a local Parquet file of coloured squares
in its columns; training runs a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/Pixtral-12B-2409": "pixtral"})
STEPS = 3

# %% [1] FastVisionModel by Hub id, 4-bit
from unsloth import FastVisionModel  # noqa: E402

model, tokenizer = FastVisionModel.from_pretrained(
    "unsloth/Pixtral-12B-2409",
    load_in_4bit=True,
    use_gradient_checkpointing="unsloth",
)

# %% [1] the notebook's `import torch` (its own cell here: the memory cells need torch, the rest does not)
import torch  # noqa: E402, F401

# %% [2] LoRA on the vision layers and the MLPs, attention left out
model = FastVisionModel.get_peft_model(
    model,
    finetune_vision_layers=True,
    finetune_language_layers=True,
    finetune_attention_modules=False,
    finetune_mlp_modules=True,
    r=8,
    lora_alpha=8,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/llava-instruct-mix-vsft-mini"], split="train")

# %% [4] the dataset's summary
print(dataset)

# %% [5] one row's first image
print(dataset[2]["images"][0])

# %% [6] its messages
print(dataset[2]["messages"])

# %% [7] SFTTrainer on the rows as they are, the collator resizing to 512
from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402
from trl import SFTTrainer, SFTConfig  # noqa: E402

FastVisionModel.for_training(model)

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    data_collator=UnslothVisionDataCollator(model, tokenizer, resize=512),
    train_dataset=dataset,
    args=SFTConfig(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=4,
        warmup_steps=1,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="paged_adamw_8bit",
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

# %% [8] memory stats before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [9] train
trainer_stats = trainer.train()

# %% [10] memory and time stats after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")


# %% [11] generation: the processor called with the image, moved to "cuda"
def ask_about(image, instruction):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
    input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    inputs = tokenizer(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")

    from transformers import TextStreamer

    text_streamer = TextStreamer(tokenizer, skip_prompt=True)
    _ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=16, use_cache=True, temperature=1.5, min_p=0.1)


FastVisionModel.for_inference(model)
ask_about(dataset[2]["images"][0], "Is there something interesting about this image?")

# %% [12] the adapter saved
model.save_pretrained("pixtral_lora")
tokenizer.save_pretrained("pixtral_lora")

# %% [13] generation again (the reload is behind `if False`, as in the notebook)
if False:
    model, tokenizer = FastVisionModel.from_pretrained(model_name="pixtral_lora", load_in_4bit=True)
    FastVisionModel.for_inference(model)
ask_about(dataset[2]["images"][0], "What colors are in the image?")

# %% [14] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)
