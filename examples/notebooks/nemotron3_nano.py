"""The Nemotron 3 Nano (30B-A3B, A100) notebook's calls, in its order, on a tiny Nemotron-H (mlx-lm's `nemotron_h`:
Mamba-2, expert and attention blocks in one hybrid pattern) under its Hub id, with a ChatML template.

Cell titles give the notebook's code-cell number. The Mamba kernels in the install cell are not installed (CUDA
builds); the dataset comes from a local file in OpenMathReasoning's columns; training is cut to a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Nemotron-3-Nano-30B-A3B": ("nemotron_h", "chatml")})
STEPS = 3

# %% [1] FastLanguageModel in 16 bits, remote code, compile and eager attention as the notebook asks
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Nemotron-3-Nano-30B-A3B",
    max_seq_length=2048,
    load_in_4bit=False,
    load_in_8bit=False,
    full_finetuning=False,
    trust_remote_code=True,
    unsloth_force_compile=True,
    attn_implementation="eager",
)

# %% [2] LoRA on attention, MLP and Mamba's in/out projections
model = FastLanguageModel.get_peft_model(
    model,
    r=8,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj", "out_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the maths dataset's cot split
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")


# %% [4] each problem and its worked solution as a conversation
def generate_conversation(examples):
    conversations = []
    for problem, solution in zip(examples["problem"], examples["generated_solution"]):
        conversations.append([{"role": "user", "content": problem}, {"role": "assistant", "content": solution}])
    return {"conversations": conversations}


dataset = dataset.map(generate_conversation, batched=True)


# %% [5] the model's own template
def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False) for convo in convos]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [6] one rendered row
print(dataset[100]["text"])

# %% [7] SFTTrainer
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

# %% [8] train on the answers only, with ChatML's markers named
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(
    trainer, instruction_part="<|im_start|>user\n", response_part="<|im_start|>assistant\n"
)

# %% [9] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [10] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [11] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [12] train
trainer_stats = trainer.train()

# %% [13] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")

# %% [14] generate without the KV cache, as the notebook does
messages = [{"role": "user", "content": "Continue the sequence: 1, 1, 2, 3, 5, 8,"}]
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=16,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
    use_cache=False,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [15] save the adapters and the tokenizer
model.save_pretrained("nemotron_lora")
tokenizer.save_pretrained("nemotron_lora")

# %% [16] reload the adapters in 4 bits (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(model_name="nemotron_lora", max_seq_length=2048, load_in_4bit=True)

# %% [17] merged 16-bit save (turned on); the 4-bit merge, LoRA save and the pushes stay off as published
model.save_pretrained_merged("nemotron_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [18] GGUF q8_0 (turned on); the other types and the pushes stay off as published
model.save_pretrained_gguf("nemotron_finetune", tokenizer)
