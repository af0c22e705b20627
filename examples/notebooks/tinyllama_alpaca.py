"""The TinyLlama (1.1B) Alpaca notebook's calls, in its order, on a tiny llama under its Hub id (see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in alpaca-cleaned's columns,
32 rows; training is cut to one step. The notebook asks for 4,096 tokens of context (RoPE is extended past the tiny
model's 256 positions) and packs its rows: the 32 pack into one sequence of about 1,500 tokens, six times the tiny
model's positions (the full 128 rows make two sequences, one of 4,096 tokens, and cost a CPU about 60 s more).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/tinyllama-bnb-4bit": ("llama", None)}, copies=4)
# One step, over the one packed sequence the 32 rows make: a batch of 1 of the 2 the notebook asks for.
STEPS = 1

# %% [1] load the pre-quantized 4-bit id with a longer context than the model's
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 4096
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/tinyllama-bnb-4bit", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)

# %% [2] LoRA adapters, gradient checkpointing off
model = FastLanguageModel.get_peft_model(
    model,
    r=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing=False,
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] a three-slot instruction prompt with the EOS appended, mapped over the dataset
alpaca_prompt = "Task:\n{}\n\nGiven:\n{}\n\nReply:\n{}"
EOS_TOKEN = tokenizer.eos_token


def formatting_prompts_func(examples):
    rows = zip(examples["instruction"], examples["input"], examples["output"])
    return {"text": [alpaca_prompt.format(i, c, o) + EOS_TOKEN for i, c, o in rows]}


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/alpaca-cleaned"], split="train")
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [4] SFTTrainer with packing, an epoch cut to a few steps
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    packing=True,
    args=SFTConfig(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        warmup_ratio=0.1,
        num_train_epochs=1,
        max_steps=STEPS,
        learning_rate=2e-5,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
    ),
)

# %% [5] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [6] train
trainer_stats = trainer.train()

# %% [7] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [8] generate from **tokenizer(...) and batch_decode
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [alpaca_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
outputs = model.generate(**inputs, max_new_tokens=64, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [9] stream with TextStreamer
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [alpaca_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=128)

# %% [10] save the adapters and the tokenizer
model.save_pretrained("tinyllama_lora")
tokenizer.save_pretrained("tinyllama_lora")

# %% [11] reload (the notebook's `if False:` turned on) and stream
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="tinyllama_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
inputs = tokenizer([alpaca_prompt.format("What is a famous tall tower in Paris?", "", "")], return_tensors="pt").to(
    "cuda"
)
text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=128)

# %% [12] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [13] merged 16-bit and LoRA saves (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("tinyllama_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("tinyllama_lora")
tokenizer.save_pretrained("tinyllama_lora")

# %% [14] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("tinyllama_finetune", tokenizer)
model.save_pretrained_gguf("tinyllama_finetune", tokenizer, quantization_method="f16")
