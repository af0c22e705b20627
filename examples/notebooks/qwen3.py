"""The Qwen 3 (14B) notebook's calls, in its order, on the tiny llama under its Hub id with Qwen 3's chat
template in its tokenizer files (see README).

Cell titles give the notebook's code-cell number. Both datasets come from local files in their columns;
training is cut to a few steps and the mix is sampled from what the small files hold.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare  # noqa: E402

DATA = prepare({"unsloth/Qwen3-14B": "qwen-3"})
STEPS = 3

# %% [1] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Qwen3-14B", max_seq_length=2048, load_in_4bit=True, load_in_8bit=False, full_finetuning=False
)

# %% [2] LoRA adapters
model = FastLanguageModel.get_peft_model(
    model,
    r=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the two datasets
from datasets import load_dataset  # noqa: E402

reasoning_dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")
non_reasoning_dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train")

# %% [4] show
print(reasoning_dataset)

# %% [5] show
print(non_reasoning_dataset)


# %% [6] problems and solutions as conversations
def generate_conversation(examples):
    pairs = zip(examples["problem"], examples["generated_solution"])
    return {"conversations": [[{"role": "user", "content": p}, {"role": "assistant", "content": s}] for p, s in pairs]}


# %% [7] render a list of conversations in one call
reasoning_conversations = tokenizer.apply_chat_template(
    list(reasoning_dataset.map(generate_conversation, batched=True)["conversations"]), tokenize=False
)

# %% [8] show
print(reasoning_conversations[0])

# %% [9] ShareGPT turns standardised, then rendered
from unsloth.chat_templates import standardize_sharegpt  # noqa: E402

dataset = standardize_sharegpt(non_reasoning_dataset)
non_reasoning_conversations = tokenizer.apply_chat_template(list(dataset["conversations"]), tokenize=False)

# %% [10] show
print(non_reasoning_conversations[0])

# %% [11] sizes
print(len(reasoning_conversations), len(non_reasoning_conversations))

# %% [12] share of chat rows
chat_percentage = 0.75

# %% [13] sample the chat rows with pandas
import pandas as pd  # noqa: E402

non_reasoning_subset = pd.Series(non_reasoning_conversations).sample(
    int(len(reasoning_conversations) * (1.0 - chat_percentage)), random_state=2407
)

# %% [14] one shuffled text dataset
data = pd.concat([pd.Series(reasoning_conversations), pd.Series(non_reasoning_subset)])
data.name = "text"
from datasets import Dataset  # noqa: E402

combined_dataset = Dataset.from_pandas(pd.DataFrame(data)).shuffle(seed=3407)

# %% [15] SFTTrainer with keywords
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=combined_dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
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
        report_to="none",
        padding_free=False,
    ),
)

# %% [16] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)

# %% [17] train
trainer_stats = trainer.train()

# %% [18] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(trainer_stats.metrics["train_runtime"], used_memory, round(used_memory / max_memory * 100, 3))

# %% [19] thinking off: stream from **tokenizer(text)
messages = [{"role": "user", "content": "Solve (x + 2)^2 = 0."}]
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=256,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [20] thinking on
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=True)
_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=1024,
    temperature=0.6,
    top_p=0.95,
    top_k=20,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [21] save the adapters and the tokenizer
model.save_pretrained("qwen_lora")
tokenizer.save_pretrained("qwen_lora")

# %% [22] reload (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(model_name="qwen_lora", max_seq_length=2048, load_in_4bit=True)

# %% [23] merged 16-bit save (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("qwen_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [24] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("qwen_finetune", tokenizer)
model.save_pretrained_gguf("qwen_finetune", tokenizer, quantization_method="f16")
