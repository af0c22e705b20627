"""The Liquid LFM2 (1.2B) Conversational notebook's calls, in its order, on a tiny LFM2 (mlx-lm's `lfm2`: short
convolution blocks between attention blocks) under its Hub id, with a ChatML-style template (see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in FineTome-100k's columns;
training is cut to a few steps. `FastModel`'s switches put LoRA on every linear under each block's attention and
feed-forward parts; `train_on_responses_only` finds its markers from the template.
"""

# %% [0] setup in place of the two install cells
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/LFM2-1.2B": ("lfm2", "lfm2")})
STEPS = 3

# %% [2] FastModel, 16-bit, LoRA later
from unsloth import FastModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/LFM2-1.2B", dtype=None, max_seq_length=2048, load_in_4bit=False, full_finetuning=False
)

# %% [3] LoRA from the finetune_* switches
model = FastModel.get_peft_model(
    model,
    finetune_vision_layers=False,
    finetune_language_layers=True,
    finetune_attention_modules=True,
    finetune_mlp_modules=True,
    r=16,
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    random_state=3407,
)

# %% [4] the template on one exchange, as text
print(
    tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hey there!"}], tokenize=False
    )
)

# %% [5] the first rows of the ShareGPT dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train[:3000]")

# %% [6] standardize_data_formats: from/value turns become role/content
from unsloth.chat_templates import standardize_data_formats  # noqa: E402

dataset = standardize_data_formats(dataset)

# %% [7] one row
print(dataset[100])


# %% [8] render each conversation, without the BOS the tokenizer adds again
def formatting_prompts_func(examples):
    texts = tokenizer.apply_chat_template(examples["conversations"], tokenize=False, add_generation_prompt=False)
    return {"text": [text.removeprefix(tokenizer.bos_token) for text in texts]}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [9] one rendered row
print(dataset[0]["text"])

# %% [10] SFTTrainer with the text field in SFTConfig
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

# %% [11] train on the responses only, markers read from the template
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [12] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [13] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [14] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [15] train
trainer_stats = trainer.train()

# %% [16] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [17] generate with Liquid's sampling settings from a tokenized dict
from transformers import TextStreamer  # noqa: E402

messages = [{"role": "user", "content": "Why is the sky blue?"}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
_ = model.generate(
    **inputs,
    max_new_tokens=128,
    temperature=0.3,
    min_p=0.15,
    repetition_penalty=1.05,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [18] a second prompt
messages = [{"role": "user", "content": "Write a poem about a sloth."}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
_ = model.generate(
    **inputs,
    max_new_tokens=128,
    temperature=0.3,
    min_p=0.15,
    repetition_penalty=1.05,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [19] save the adapters and the tokenizer
model.save_pretrained("liquid_lora")
tokenizer.save_pretrained("liquid_lora")

# %% [20] reload through FastModel with transformers' LFM2 class named (the notebook's `if False:` turned on)
from transformers import Lfm2ForCausalLM  # noqa: E402

model, tokenizer = FastModel.from_pretrained(
    model_name="liquid_lora", max_seq_length=2048, dtype=None, auto_model=Lfm2ForCausalLM, load_in_4bit=False
)
FastModel.for_inference(model)
messages = [{"role": "user", "content": "How do I code up a transformer?"}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
_ = model.generate(
    **inputs,
    max_new_tokens=128,
    temperature=0.3,
    min_p=0.15,
    repetition_penalty=1.05,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [21] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [22] merged 16-bit and LoRA saves (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("liquid_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("liquid_lora")
tokenizer.save_pretrained("liquid_lora")

# %% [23] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("liquid_finetune", tokenizer)
model.save_pretrained_gguf("liquid_finetune", tokenizer, quantization_method="f16")
