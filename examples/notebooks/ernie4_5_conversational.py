"""The ERNIE 4.5 (21B-A3B PT) Conversational notebook's calls, in its order, on a tiny ERNIE 4.5 MoE (mlx-lm's
`ernie4_5_moe`: a dense first block, then experts beside a shared expert) under its Hub id, with a template in
ERNIE's "User: / Assistant: " turns.

Cell titles give the notebook's code-cell number. The notebook loads in 4 bits (`load_in_4bit = True`), which MLX
does with its own 4-bit quantization; the dataset comes from a local file in FineTome-100k's columns; training is cut
to a few steps; the responses-only markers are the notebook's own "User:" and "Assistant:".
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/ERNIE-4.5-21B-A3B-PT": ("ernie4_5_moe", "ernie")})
STEPS = 3

# %% [1] FastModel in 4 bits
from unsloth import FastModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/ERNIE-4.5-21B-A3B-PT",
    max_seq_length=2048,
    load_in_4bit=True,
    load_in_8bit=False,
    full_finetuning=False,
)

# %% [2] LoRA on attention and the MLP names
model = FastModel.get_peft_model(
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

# %% [3] the ShareGPT dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train")

# %% [4] standardize_data_formats
from unsloth.chat_templates import standardize_data_formats  # noqa: E402

dataset = standardize_data_formats(dataset)

# %% [5] one row
print(dataset[100])


# %% [6] the model's own template, with the EOS appended to each text
def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [
        tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False) + tokenizer.eos_token
        for convo in convos
    ]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [7] one rendered row
print(dataset[100]["text"])

# %% [8] SFTTrainer
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        warmup_steps=5,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        report_to="none",
    ),
)

# %% [9] the first row's tokens
print(tokenizer.decode(trainer.train_dataset[0]["input_ids"]))

# %% [10] train on the answers only, with ERNIE's markers named
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer, instruction_part="User:", response_part="Assistant:")

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
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [14] train
trainer_stats = trainer.train()

# %% [15] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [16] generate from the rendered prompt
messages = [{"role": "user", "content": "Continue the sequence: 1, 1, 2, 3, 5, 8,"}]
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=16,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [17] save the adapters and the tokenizer
model.save_pretrained("ernie_lora")
tokenizer.save_pretrained("ernie_lora")

# %% [18] reload the adapters through FastLanguageModel in 4 bits (the notebook's `if False:` turned on)
from unsloth import FastLanguageModel  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(model_name="ernie_lora", max_seq_length=2048, load_in_4bit=True)

# %% [19] merged 16-bit save (turned on); the 4-bit merge, LoRA save and the pushes stay off as published
model.save_pretrained_merged("ernie_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [20] GGUF q8_0 (turned on); f16, q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("ernie_finetune", tokenizer)
