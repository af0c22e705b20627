"""The Llama 3.2 (1B and 3B) Conversational notebook's calls, in its order, on the tiny llama (see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in FineTome-100k's columns;
training is cut to a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare  # noqa: E402

DATA = prepare({"unsloth/Llama-3.2-3B-Instruct": None})
STEPS = 3

# %% [1] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 2048
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Llama-3.2-3B-Instruct", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)

# %% [2] LoRA adapters
model = FastLanguageModel.get_peft_model(
    model,
    r=16,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] llama-3.1 chat template, formatting function, dataset
from unsloth.chat_templates import get_chat_template  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="llama-3.1")


def formatting_prompts_func(examples):
    texts = [
        tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in examples["conversations"]
    ]
    return {"text": texts}


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train")

# %% [4] standardize_sharegpt, then render
from unsloth.chat_templates import standardize_sharegpt  # noqa: E402

dataset = standardize_sharegpt(dataset)
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [5] a row's conversation
print(dataset[5]["conversations"])

# %% [6] a row's text
print(dataset[5]["text"])

# %% [7] SFTTrainer with TRL's older keywords and a Seq2Seq collator
from trl import SFTConfig, SFTTrainer  # noqa: E402
from transformers import DataCollatorForSeq2Seq  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    data_collator=DataCollatorForSeq2Seq(tokenizer=tokenizer),
    packing=False,
    args=SFTConfig(
        per_device_train_batch_size=2,
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

# %% [8] train on the responses only
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [9] decode a prepared row
print(tokenizer.decode(trainer.train_dataset[5]["input_ids"]))

# %% [10] decode its labels, masked positions as spaces
space = tokenizer(" ", add_special_tokens=False).input_ids[0]
print(tokenizer.decode([space if x == -100 else x for x in trainer.train_dataset[5]["labels"]]))

# %% [11] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB. {start_gpu_memory} GB reserved.")

# %% [12] train
trainer_stats = trainer.train()

# %% [13] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
used_memory_for_lora = round(used_memory - start_gpu_memory, 3)
print(trainer_stats.metrics["train_runtime"], round(trainer_stats.metrics["train_runtime"] / 60, 2))
print(used_memory, used_memory_for_lora, round(used_memory / max_memory * 100, 3))

# %% [14] generate and batch_decode
tokenizer = get_chat_template(tokenizer, chat_template="llama-3.1")
FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "Continue the fibonacci sequence: 1, 1, 2, 3, 5, 8,"}]
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
outputs = model.generate(input_ids=inputs, max_new_tokens=64, use_cache=True, temperature=1.5, min_p=0.1)
print(tokenizer.batch_decode(outputs))

# %% [15] stream with TextStreamer
FastLanguageModel.for_inference(model)
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(
    input_ids=inputs, streamer=text_streamer, max_new_tokens=128, use_cache=True, temperature=1.5, min_p=0.1
)

# %% [16] save the adapters and the tokenizer
model.save_pretrained("llama_lora")
tokenizer.save_pretrained("llama_lora")

# %% [17] reload (the notebook's `if False:` turned on) and stream
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="llama_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "Describe a tall tower in the capital of France."}]
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(
    input_ids=inputs, streamer=text_streamer, max_new_tokens=128, use_cache=True, temperature=1.5, min_p=0.1
)

# %% [18] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [19] merged 16-bit save (turned on); 4-bit merge and pushes stay off as published
model.save_pretrained_merged("llama_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [20] GGUF saves (turned on: q8_0 and f16); q4_k_m and pushes stay off as published
model.save_pretrained_gguf("llama_finetune", tokenizer)
model.save_pretrained_gguf("llama_finetune", tokenizer, quantization_method="f16")
