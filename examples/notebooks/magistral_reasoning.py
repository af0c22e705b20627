"""The Magistral (24B) Reasoning-Conversational notebook's calls, in its order, on a tiny mistral under its Hub id
with a template in Magistral's [INST] turns (see README).

Cell titles give the notebook's code-cell number. The reasoning traces come from a local file in
OpenMathReasoning-mini's columns; training is cut to a few steps. The notebook asks for `device_map="balanced"`
(two GPUs); MLX has one device, which that request leaves alone.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Magistral-Small-2509-unsloth-bnb-4bit": ("mistral", "magistral")})
STEPS = 3

# %% [1] load the pre-quantized id in 4 bits, spread over the devices
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Magistral-Small-2509-unsloth-bnb-4bit",
    max_seq_length=2048,
    load_in_4bit=True,
    load_in_8bit=False,
    full_finetuning=False,
    device_map="balanced",
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

# %% [3] the reasoning split
from datasets import load_dataset  # noqa: E402

reasoning_dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")

# %% [4] show it
print(reasoning_dataset)


# %% [5] problem and solution as a two-turn conversation
def generate_conversation(example):
    turns = [
        {"role": "user", "content": example["problem"]},
        {"role": "assistant", "content": example["generated_solution"]},
    ]
    return {"conversations": turns}


# %% [6] map, then render each conversation as text
reasoning_dataset = reasoning_dataset.map(generate_conversation)
reasoning_conversations = [
    tokenizer.apply_chat_template(row["conversations"], tokenize=False) for row in reasoning_dataset
]

# %% [7] the first rendered conversation
print(reasoning_conversations[0])

# %% [8] how many
print(len(reasoning_conversations))

# %% [9] one `text` column through pandas, shuffled
import pandas as pd  # noqa: E402

data = pd.concat([pd.Series(reasoning_conversations)])
data.name = "text"
from datasets import Dataset  # noqa: E402

combined_dataset = Dataset.from_pandas(pd.DataFrame(data))
combined_dataset = combined_dataset.shuffle(seed=3407)

# %% [10] SFTTrainer with the text field in SFTConfig
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=combined_dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=2,
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

# %% [11] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [12] train
trainer_stats = trainer.train()

# %% [13] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [14] generate from a message whose content is a list of parts
from transformers import TextStreamer  # noqa: E402

messages = [{"role": "user", "content": [{"type": "text", "text": "Solve (x + 2)^2 = 0."}]}]
inputs = tokenizer.apply_chat_template(
    messages, tokenize=True, add_generation_prompt=True, return_tensors="pt", return_dict=True
).to("cuda")
_ = model.generate(
    **inputs, max_new_tokens=128, temperature=0.7, top_p=0.95, streamer=TextStreamer(tokenizer, skip_prompt=True)
)

# %% [15] save the adapters and the tokenizer
model.save_pretrained("magistral_lora")
tokenizer.save_pretrained("magistral_lora")

# %% [16] reload (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="magistral_lora", max_seq_length=2048, load_in_4bit=True
)

# %% [17] merged 16-bit and LoRA saves (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("magistral_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("magistral_lora")
tokenizer.save_pretrained("magistral_lora")

# %% [18] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("magistral_finetune", tokenizer)
model.save_pretrained_gguf("magistral_finetune", tokenizer, quantization_method="f16")
