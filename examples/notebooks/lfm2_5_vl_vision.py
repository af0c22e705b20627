"""The LFM2.5-VL (1.6B) Vision notebook's calls, in its order, on a tiny LFM2-VL (mlx-vlm's `lfm2_vl`: a conv +
attention text model, a SigLIP 2 tower) under its Hub id: `FastVisionModel` in 16 bits with `max_seq_length`, LoRA
on the language layers only, the chat template rendered as text, LaTeX OCR conversations from a sliced split,
generation before and after `SFTTrainer` with `UnslothVisionDataCollator`, then the adapter saved.

Cell titles give the notebook's code-cell number. LaTeX_OCR comes from a local Parquet file of coloured squares
in its columns (`image`, `text`); training runs a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"LiquidAI/LFM2.5-VL-1.6B": "lfm2_vl"}, rows=8)
STEPS = 3

# %% [1] FastVisionModel by Hub id, 16-bit
from unsloth import FastVisionModel  # noqa: E402

model, tokenizer = FastVisionModel.from_pretrained(
    model_name="LiquidAI/LFM2.5-VL-1.6B",
    max_seq_length=2048,
    load_in_4bit=False,
)

# %% [1] the notebook's `import torch` (its own cell here: the memory cells need torch, the rest does not)
import torch  # noqa: E402, F401

# %% [2] LoRA on the language layers, the vision tower left as it is
model = FastVisionModel.get_peft_model(
    model,
    finetune_vision_layers=False,
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

# %% [3] the chat template rendered as text: an image part in the question, a plain-string answer
print(
    tokenizer.apply_chat_template(
        [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]},
            {"role": "assistant", "content": "A square of one colour."},
        ],
        tokenize=False,
    )
)

# %% [4] the dataset, a slice of its train split
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/LaTeX_OCR"], split="train[:3000]")

# %% [5] the dataset's summary
print(dataset)

# %% [6] one image
print(dataset[2]["image"])

# %% [7] its text
print(dataset[2]["text"])

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

# %% [12] SFTTrainer with the vision collator and the notebook's vision SFTConfig
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
model.save_pretrained("lfm_lora")
tokenizer.save_pretrained("lfm_lora")

# %% [18] generation on another row (the reload is behind `if False`, as in the notebook)
if False:
    model, tokenizer = FastVisionModel.from_pretrained(model_name="lfm_lora", load_in_4bit=True)
    FastVisionModel.for_inference(model)
ask_about(dataset[0]["image"])

# %% [19] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)

# %% [20] GGUF saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_gguf("lfm_finetune", tokenizer)
