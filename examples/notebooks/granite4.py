"""The Granite 4.0 notebook's calls, in its order, on a tiny Granite 4.0-H micro (mlx-lm's `granitemoehybrid`,
dense: Mamba blocks and an attention block, each with a shared MLP) under its Hub id, with a template in Granite's
role markers (see README).

Cell titles give the notebook's code-cell number. The support-chat sheet comes from a local CSV in its columns;
training is cut to a few steps. The LoRA list names `shared_mlp.input_linear` / `shared_mlp.output_linear` beside
the usual projections; `train_on_responses_only` finds its markers from the template.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/granite-4.0-h-micro": ("granitemoehybrid-dense", "granite")})
STEPS = 3

# %% [1] load in 16 bits
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/granite-4.0-h-micro",
    max_seq_length=2048,
    load_in_4bit=False,
    load_in_8bit=False,
    full_finetuning=False,
)

# %% [2] LoRA on the projections and the shared MLP
model = FastLanguageModel.get_peft_model(
    model,
    r=32,
    target_modules=[
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "shared_mlp.input_linear",
        "shared_mlp.output_linear",
    ],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the sheet, read as CSV with its own column names
from datasets import Dataset, load_dataset  # noqa: E402, F401

dataset = load_dataset(
    "csv",
    data_files={"train": DATA["unsloth/Support-Bot-Recommendation"]},
    column_names=["snippet", "recommendation"],
    skiprows=1,
)["train"]


# %% [4] each row as a user/assistant exchange through the template
def formatting_prompts_func(examples):
    pairs = zip(examples["snippet"], examples["recommendation"])
    conversations = [[{"role": "user", "content": u}, {"role": "assistant", "content": a}] for u, a in pairs]
    return {
        "text": [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in conversations]
    }


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [5] a snippet
print(dataset[5]["snippet"])

# %% [6] its recommendation
print(dataset[5]["recommendation"])

# %% [7] its rendered text
print(dataset[5]["text"])

# %% [8] SFTTrainer with the text field in SFTConfig
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
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
    ),
)

# %% [9] train on the responses only, markers read from the template
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [10] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [11] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [12] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [13] train
trainer_stats = trainer.train()

# %% [14] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [15] test scenarios (short support chats)
scenario_1 = "\nUser: My screen share shows black to everyone.\nAgent: Window or whole screen?\nUser: Whole screen.\n"
scenario_2 = "\nUser: The lock app says 5 % after new batteries.\nAgent: Which firmware?\nUser: A beta build.\n"

# %% [16] sample a reply from a padded, tokenized dict
from transformers import TextStreamer  # noqa: E402

FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": scenario_1}]
inputs = tokenizer.apply_chat_template(
    messages, tokenize=True, add_generation_prompt=True, padding=True, return_tensors="pt", return_dict=True
).to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=False)
_ = model.generate(
    **inputs,
    streamer=text_streamer,
    max_new_tokens=64,
    use_cache=True,
    do_sample=True,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)

# %% [17] a greedy reply to the second scenario
FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": scenario_2}]
inputs = tokenizer.apply_chat_template(
    messages, tokenize=True, add_generation_prompt=True, padding=True, return_tensors="pt", return_dict=True
).to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=False)
_ = model.generate(
    **inputs,
    streamer=text_streamer,
    max_new_tokens=64,
    use_cache=True,
    do_sample=False,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)

# %% [18] save the adapters and the tokenizer
model.save_pretrained("granite_lora")
tokenizer.save_pretrained("granite_lora")

# %% [19] reload in 4 bits (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(model_name="granite_lora", max_seq_length=2048, load_in_4bit=True)

# %% [20] merged 16-bit and 4-bit saves and the LoRA save (turned on); the pushes stay off as published
model.save_pretrained_merged("granite_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained_merged("granite_finetune_4bit", tokenizer, save_method="merged_4bit")
model.save_pretrained("granite_lora")
tokenizer.save_pretrained("granite_lora")

# %% [21] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("granite_finetune", tokenizer)
model.save_pretrained_gguf("granite_finetune", tokenizer, quantization_method="f16")
