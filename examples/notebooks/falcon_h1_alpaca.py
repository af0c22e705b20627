"""The Falcon H1 (0.5B) Alpaca notebook's calls, in its order, on a tiny Falcon-H1 (mlx-lm's `falcon_h1`: a Mamba-2
mixer beside attention in every block) under its Hub id, loaded in 4 bits as the notebook asks.

Cell titles give the notebook's code-cell number. The Mamba kernels' install cell is not run (CUDA builds); the
dataset comes from a local file in alpaca-cleaned's columns; training is cut to a few steps; SFTTrainer takes the
text field, length and packing switches directly, as this notebook passes them.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Falcon-H1-0.5B-Instruct": ("falcon_h1", None)})
STEPS = 3

# %% [1] the causal-conv1d and mamba-ssm CUDA kernels (not run: they build for CUDA only)

# %% [2] FastLanguageModel in 4 bits, dtype auto
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 2048
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Falcon-H1-0.5B-Instruct", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)

# %% [3] LoRA on attention and the MLP, with dropout and no gradient checkpointing
model = FastLanguageModel.get_peft_model(
    model,
    r=16,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=16,
    lora_dropout=0.1,
    use_gradient_checkpointing=False,
    random_state=3407,
)

# %% [4] the Alpaca prompt, each text closed by the EOS
alpaca_prompt = """Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.
### Instruction:
{}
### Input:
{}
### Response:
{}"""

EOS_TOKEN = tokenizer.eos_token


def formatting_prompts_func(examples):
    texts = []
    for instruction, input, output in zip(examples["instruction"], examples["input"], examples["output"]):
        texts.append(alpaca_prompt.format(instruction, input, output) + EOS_TOKEN)
    return {"text": texts}


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/alpaca-cleaned"], split="train")
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [5] SFTTrainer with the text field, length, processes and packing on the trainer
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    dataset_num_proc=2,
    packing=False,
    args=SFTConfig(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=8,
        warmup_steps=5,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
    ),
)

# %% [6] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [7] train
trainer_stats = trainer.train()

# %% [8] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [9] for_inference, then a batch decode
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [alpaca_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
outputs = model.generate(**inputs, max_new_tokens=16, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [10] streamed
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [alpaca_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=16)

# %% [11] save the adapters and the tokenizer
model.save_pretrained("falcon_h1_lora")
tokenizer.save_pretrained("falcon_h1_lora")

# %% [12] reload the adapters in 4 bits (the notebook's `if False:` turned on), then one answer
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="falcon_h1_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
inputs = tokenizer([alpaca_prompt.format("What is a famous tall tower in Paris?", "", "")], return_tensors="pt").to(
    "cuda"
)
_ = model.generate(**inputs, streamer=TextStreamer(tokenizer), max_new_tokens=16)

# %% [13] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [14] merged 16-bit save (turned on); the 4-bit merge, LoRA save and the pushes stay off as published
model.save_pretrained_merged("falcon_h1_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [15] GGUF q8_0 (turned on); the other types and the pushes stay off as published
model.save_pretrained_gguf("falcon_h1_finetune", tokenizer)
