"""The Gemma 3 (4B) notebook's calls, in its order, through `FastModel`, on the tiny llama under its Hub id
(see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in FineTome-100k's columns;
training is cut to a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare  # noqa: E402

DATA = prepare({"unsloth/gemma-3-4b-it": None})
STEPS = 3

# %% [1] FastModel in 4 bits by Hub id
from unsloth import FastModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/gemma-3-4b-it",
    max_seq_length=2048,
    load_in_4bit=True,
    load_in_8bit=False,
    full_finetuning=False,
)

# %% [2] LoRA through the finetune_* switches
model = FastModel.get_peft_model(
    model,
    finetune_vision_layers=False,
    finetune_language_layers=True,
    finetune_attention_modules=True,
    finetune_mlp_modules=True,
    r=8,
    lora_alpha=8,
    lora_dropout=0,
    bias="none",
    random_state=3407,
)

# %% [3] gemma-3 chat template
from unsloth.chat_templates import get_chat_template  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="gemma-3")

# %% [4] dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train")

# %% [5] standardize_data_formats
from unsloth.chat_templates import standardize_data_formats  # noqa: E402

dataset = standardize_data_formats(dataset)

# %% [6] show a row
print(dataset[100])


# %% [7] render without the leading <bos>
def formatting_prompts_func(examples):
    rendered = [
        tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in examples["conversations"]
    ]
    return {"text": [text.removeprefix("<bos>") for text in rendered]}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [8] show a row's text
print(dataset[100]["text"])

# %% [9] SFTTrainer with keywords
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

# %% [10] train on the responses only (markers from the template)
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [11] decode a prepared row
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [12] decode its labels, masked positions as the pad token's text replaced by spaces
labels = trainer.train_dataset[100]["labels"]
print(tokenizer.decode([tokenizer.pad_token_id if x == -100 else x for x in labels]).replace(tokenizer.pad_token, " "))

# %% [13] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)

# %% [14] train
trainer_stats = trainer.train()

# %% [15] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(trainer_stats.metrics["train_runtime"], used_memory, round(used_memory / max_memory * 100, 3))

# %% [16] list-of-parts content, a BatchEncoding of torch tensors, batch_decode
tokenizer = get_chat_template(tokenizer, chat_template="gemma-3")
messages = [{"role": "user", "content": [{"type": "text", "text": "Continue the sequence: 1, 1, 2, 3, 5, 8,"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, tokenize=True, return_tensors="pt", return_dict=True
)
outputs = model.generate(**inputs.to("cuda"), max_new_tokens=64, temperature=1.0, top_p=0.95, top_k=64)
print(tokenizer.batch_decode(outputs))

# %% [17] stream
messages = [{"role": "user", "content": [{"type": "text", "text": "Why is the sky blue?"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, tokenize=True, return_tensors="pt", return_dict=True
)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **inputs.to("cuda"),
    max_new_tokens=64,
    temperature=1.0,
    top_p=0.95,
    top_k=64,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [18] save the adapters and the tokenizer
model.save_pretrained("gemma_3_lora")
tokenizer.save_pretrained("gemma_3_lora")

# %% [19] reload through FastModel (the notebook's `if False:` turned on) and stream
model, tokenizer = FastModel.from_pretrained(model_name="gemma_3_lora", max_seq_length=2048, load_in_4bit=True)
messages = [{"role": "user", "content": [{"type": "text", "text": "What is Gemma-3?"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, tokenize=True, return_tensors="pt", return_dict=True
)
_ = model.generate(
    **inputs.to("cuda"),
    max_new_tokens=64,
    temperature=1.0,
    top_p=0.95,
    top_k=64,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [20] merged save (turned on)
model.save_pretrained_merged("gemma-3-finetune", tokenizer)

# %% [21] push_to_hub_merged (`if False:` in the notebook; tests/mlx_api/test_hub_push.py runs it on a stand-in Hub)

# %% [22] GGUF save in Q8_0 (turned on)
model.save_pretrained_gguf("gemma_3_finetune", tokenizer, quantization_method="Q8_0")

# %% [23] push_to_hub_gguf (`if False:` in the notebook; tests/mlx_api/test_hub_push.py runs it on a stand-in Hub)
