"""The Mistral v0.3 (7B) continued-pretraining (CPT) notebook's calls, in its order, on a tiny mistral under its Hub
id (see README).

Cell titles give the notebook's code-cell number. Both datasets (a Wikipedia language split and a translated Alpaca
in ShareGPT turns) come from local files in their columns; both trainings are cut to a few steps. The LoRA targets
include `embed_tokens` and `lm_head`, trained in full under `embedding_learning_rate`.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/mistral-7b-v0.3": ("mistral", None)})
STEPS = 3

# %% [1] the notebook's %env line: keep the logits (no cut cross-entropy)
import os  # noqa: E402

os.environ["UNSLOTH_RETURN_LOGITS"] = "1"

# %% [2] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 2048
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/mistral-7b-v0.3", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)

# %% [3] LoRA on the seven projections plus embed_tokens and lm_head, rank-stabilised
model = FastLanguageModel.get_peft_model(
    model,
    r=128,
    target_modules=[
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "embed_tokens",
        "lm_head",
    ],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=True,
    loftq_config=None,
)
EMBEDDING_BEFORE = model.model.embed_tokens.weight.tolist()

# %% [4] an article prompt (title and text) with the EOS appended
article_prompt = "Encyclopedia entry\nTitle: {}\n\nBody:\n{}"
EOS_TOKEN = tokenizer.eos_token


def formatting_prompts_func(examples):
    return {"text": [article_prompt.format(t, x) + EOS_TOKEN for t, x in zip(examples["title"], examples["text"])]}


# %% [5] the Wikipedia split, a share of it, mapped
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["wikimedia/wikipedia"], split="train")
dataset = dataset.train_test_split(train_size=0.5)["train"]
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [6] UnslothTrainer with a smaller learning rate for the embedding matrices
from transformers import TrainingArguments  # noqa: E402, F401
from unsloth import UnslothTrainer, UnslothTrainingArguments  # noqa: E402

trainer = UnslothTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    dataset_num_proc=4,
    args=UnslothTrainingArguments(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=8,
        max_steps=STEPS,
        warmup_steps=10,
        learning_rate=5e-5,
        embedding_learning_rate=1e-5,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
    ),
)

# %% [7] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [8] continued pretraining; the embedding matrix is trained, not only logged about
trainer_stats = trainer.train()
assert model.model.embed_tokens.weight.tolist() != EMBEDDING_BEFORE, "embed_tokens did not train"

# %% [9] the instruction dataset (ShareGPT turns)
alpaca_dataset = load_dataset("json", data_files=DATA["FreedomIntelligence/alpaca-gpt4-korean"], split="train")

# %% [10] one row
print(alpaca_dataset[0])

# %% [11] a two-slot instruction prompt filled from the first two turns
alpaca_prompt = "Request:\n{}\n\nAnswer:\n{}"
EOS_TOKEN = tokenizer.eos_token


def formatting_prompts_func(conversations):
    turns = conversations["conversations"]
    return {"text": [alpaca_prompt.format(c[0]["value"], c[1]["value"]) + EOS_TOKEN for c in turns]}


alpaca_dataset = alpaca_dataset.map(formatting_prompts_func, batched=True)

# %% [12] a second UnslothTrainer on the same adapters
trainer = UnslothTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=alpaca_dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    dataset_num_proc=8,
    args=UnslothTrainingArguments(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=8,
        max_steps=STEPS,
        warmup_steps=10,
        learning_rate=5e-5,
        embedding_learning_rate=1e-5,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.00,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
    ),
)

# %% [13] instruction fine-tuning
trainer_stats = trainer.train()

# %% [14] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [15] generate and batch_decode
FastLanguageModel.for_inference(model)
inputs = tokenizer([alpaca_prompt.format("Continue the sequence: 1, 1, 2, 3, 5, 8,", "")], return_tensors="pt").to(
    "cuda"
)
outputs = model.generate(**inputs, max_new_tokens=64, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [16] stream with TextStreamer
FastLanguageModel.for_inference(model)
inputs = tokenizer([alpaca_prompt.format("What is music like where you live?", "")], return_tensors="pt").to("cuda")
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=128)

# %% [17] save the adapters (embed_tokens and lm_head with them) and the tokenizer
model.save_pretrained("mistral_v0_lora")
tokenizer.save_pretrained("mistral_v0_lora")

# %% [18] reload (the notebook's `if False:` turned on) and stream with a repetition penalty
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="mistral_v0_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
inputs = tokenizer([alpaca_prompt.format("Describe the planet Earth at length.", "")], return_tensors="pt").to("cuda")
text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=128, repetition_penalty=0.1)

# %% [19] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [20] merged 16-bit and LoRA saves (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("mistral_v0_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("mistral_v0_lora")
tokenizer.save_pretrained("mistral_v0_lora")

# %% [21] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("mistral_v0_finetune", tokenizer)
model.save_pretrained_gguf("mistral_v0_finetune", tokenizer, quantization_method="f16")
