"""The gpt-oss (20B) fine-tuning notebook's calls, in its order, on a tiny gpt-oss (mlx-lm's `gpt_oss`: every MLP
is SwitchGLU experts) under its Hub id, with a short harmony-style template (see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in Multilingual-Thinking's
columns (messages with a `thinking` key); training is cut to a few steps. `gate_proj` / `up_proj` / `down_proj`
are the experts' projections, and get LoRA through mlx-lm's SwitchLinear LoRA.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/gpt-oss-20b": ("gpt_oss", "gpt_oss")})
STEPS = 3

# %% [1] load the MXFP4 id in 4 bits
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 1024
dtype = None
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/gpt-oss-20b",
    dtype=dtype,
    max_seq_length=max_seq_length,
    load_in_4bit=True,
    full_finetuning=False,
)

# %% [2] LoRA on attention and the experts' projections
model = FastLanguageModel.get_peft_model(
    model,
    r=8,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] generate with low reasoning effort (a template keyword)
from transformers import TextStreamer  # noqa: E402

messages = [{"role": "user", "content": "Solve x^5 + 3x^4 - 10 = 3."}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, reasoning_effort="low"
).to("cuda")
_ = model.generate(**inputs, max_new_tokens=64, streamer=TextStreamer(tokenizer))

# %% [4] medium effort
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, reasoning_effort="medium"
).to("cuda")
_ = model.generate(**inputs, max_new_tokens=64, streamer=TextStreamer(tokenizer))

# %% [5] high effort
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, reasoning_effort="high"
).to("cuda")
_ = model.generate(**inputs, max_new_tokens=64, streamer=TextStreamer(tokenizer))


# %% [6] the formatting function, and the dataset
def formatting_prompts_func(examples):
    rendered = [
        tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in examples["messages"]
    ]
    return {"text": rendered}


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["HuggingFaceH4/Multilingual-Thinking"], split="train")
print(dataset)

# %% [7] standardize_sharegpt keeps `messages` and each turn's `thinking`; then render
from unsloth.chat_templates import standardize_sharegpt  # noqa: E402

dataset = standardize_sharegpt(dataset)
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [8] one rendered row: the thinking sits on the analysis channel
print(dataset[0]["text"])
assert "<|channel|>analysis<|message|>" in dataset[0]["text"]

# %% [9] SFTTrainer
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    args=SFTConfig(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=4,
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

# %% [10] train on the final answers only, with gpt-oss's markers
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

gpt_oss_kwargs = dict(
    instruction_part="<|start|>user<|message|>", response_part="<|start|>assistant<|channel|>final<|message|>"
)
trainer = train_on_responses_only(trainer, **gpt_oss_kwargs)

# %% [11] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [12] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [13] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [14] train
trainer_stats = trainer.train()

# %% [15] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [16] generate with a system turn naming the reasoning language
messages = [
    {"role": "system", "content": "reasoning language: French\n\nYou solve mathematical problems."},
    {"role": "user", "content": "Solve x^5 + 3x^4 - 10 = 3."},
]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, reasoning_effort="medium"
).to("cuda")
_ = model.generate(**inputs, max_new_tokens=64, streamer=TextStreamer(tokenizer))

# %% [17] save the adapters
model.save_pretrained("gpt_oss_lora")

# %% [18] reload (the notebook's `if False:` turned on) and generate with high effort
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="gpt_oss_lora", max_seq_length=1024, dtype=None, load_in_4bit=True
)
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, reasoning_effort="high"
).to("cuda")
_ = model.generate(**inputs, max_new_tokens=64, streamer=TextStreamer(tokenizer))

# %% [19] merged saves in MXFP4 and 16 bits (turned on); the pushes stay off as published
model.save_pretrained_merged("gpt_oss_finetune_4bit", tokenizer, save_method="mxfp4")
model.save_pretrained_merged("gpt_oss_finetune_16bit", tokenizer, save_method="merged_16bit")
