"""The Gemma 4 (E2B) Vision notebook's calls, in its order, on a tiny Gemma 4 (mlx-vlm's `gemma4`: a vision tower
and per-layer input embeddings) under its Hub id: `FastVisionModel` in 16 bits, LoRA on both towers with
`target_modules="all-linear"`, the `gemma-4` chat template on the processor, generation before and after
`SFTTrainer` with `UnslothVisionDataCollator` (the tokenizer as `processing_class`), then the adapter saved.

Cell titles give the notebook's code-cell number. LaTeX_OCR comes from a local Parquet file of coloured squares
in its columns; training runs a few steps. The installs and the IPython formula display are not run.
"""

# %% [0] setup in place of the two install cells
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/gemma-4-E2B-it": "gemma4"})
STEPS = 3

# %% [2] FastVisionModel by Hub id, 16-bit
from unsloth import FastVisionModel  # noqa: E402

gemma4_models = ["unsloth/gemma-4-E2B-it", "unsloth/gemma-4-E4B-it", "unsloth/gemma-4-31B-it"]
model, processor = FastVisionModel.from_pretrained(
    "unsloth/gemma-4-E2B-it",
    load_in_4bit=False,
    use_gradient_checkpointing="unsloth",
)

# %% [2] the notebook's `import torch` (its own cell here: the memory cells need torch, the rest does not)
import torch  # noqa: E402, F401

# %% [3] LoRA on every linear of both towers
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
    target_modules="all-linear",
)

# %% [4] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/LaTeX_OCR"], split="train")

# %% [5] the dataset's summary
print(dataset)

# %% [6] one image
print(dataset[2]["image"])

# %% [7] its text
print(dataset[2]["text"])

# %% [8] the formula shown through IPython (not run here: no IPython)

# %% [9] rows as conversations with an image part
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


# %% [10] the converted dataset
converted_dataset = [convert_to_conversation(sample) for sample in dataset]

# %% [11] one converted row
print(converted_dataset[0])

# %% [12] the gemma-4 chat template on the processor
from unsloth import get_chat_template  # noqa: E402

processor = get_chat_template(processor, "gemma-4")


# %% [13] generation before training: the processor called with the image, moved to "cuda"
def ask_about(image, text=instruction, streamer_tokenizer=None):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    input_text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")

    from transformers import TextStreamer

    text_streamer = TextStreamer(streamer_tokenizer or processor, skip_prompt=True)
    return model.generate(
        **inputs, streamer=text_streamer, max_new_tokens=16, use_cache=True, temperature=1.0, top_p=0.95, top_k=64
    )


result = ask_about(dataset[2]["image"])

# %% [14] SFTTrainer with the vision collator, the tokenizer as processing_class
from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    train_dataset=converted_dataset,
    processing_class=processor.tokenizer,
    data_collator=UnslothVisionDataCollator(model, processor),
    args=SFTConfig(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=4,
        max_grad_norm=0.3,
        warmup_ratio=0.03,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        save_strategy="steps",
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="cosine",
        seed=3407,
        output_dir="outputs",
        report_to="none",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=2048,
    ),
)

# %% [15] memory stats before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [16] train
trainer_stats = trainer.train()

# %% [17] memory and time stats after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [18] generation after training
result = ask_about(dataset[10]["image"])

# %% [19] the adapter saved
model.save_pretrained("gemma_4_lora")
processor.save_pretrained("gemma_4_lora")

# %% [20] generation on a row's own text, streamed through processor.tokenizer (the reload is behind `if False`)
if False:
    model, processor = FastVisionModel.from_pretrained(model_name="gemma_4_lora", load_in_4bit=True)
sample = dataset[1]
image = sample["image"].convert("RGB")
_ = ask_about(image, sample["text"], processor.tokenizer)

# %% [21] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", processor)
