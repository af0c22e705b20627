"""The Phi-3.5 Mini Conversational notebook's calls, in its order, on a tiny llama under its Hub id (see README).

The stand-in is a llama because the notebook's LoRA names (`q_proj`, ..., `gate_proj`, `up_proj`) are Llama's
separate projections; mlx-lm's own `phi3` class fuses them into `qkv_proj` / `gate_up_proj`, where those names are
refused with the model's own names.

Cell titles give the notebook's code-cell number. The dataset comes from a local file in guanaco-sharegpt-style's
columns (`from` / `value` turns, which the template's `mapping` reads as they are); training is cut to a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Phi-3.5-mini-instruct": ("llama", None)})
STEPS = 3

# %% [1] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 2048
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Phi-3.5-mini-instruct", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
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

# %% [3] Phi-3's template reading ShareGPT keys, rendered over the dataset
from unsloth.chat_templates import get_chat_template  # noqa: E402

tokenizer = get_chat_template(
    tokenizer,
    chat_template="phi-3",
    mapping={"role": "from", "content": "value", "user": "human", "assistant": "gpt"},
)


def formatting_prompts_func(examples):
    rendered = [
        tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False) for c in examples["conversations"]
    ]
    return {"text": rendered}


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train")
dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [4] one row's turns
print(dataset[5]["conversations"])

# %% [5] the same row rendered
print(dataset[5]["text"])

# %% [6] a hand-written template and its EOS (the notebook leaves applying it under `if False:`)
unsloth_template = (
    "{{ bos_token }}{{ 'You help the user.\n' }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token + '\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)
unsloth_eos_token = "eos_token"

# %% [7] SFTTrainer with TRL's older keywords
from trl import SFTConfig, SFTTrainer  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
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

# %% [8] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [9] train
trainer_stats = trainer.train()

# %% [10] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [11] the template again, then generate from ShareGPT-keyed messages with input_ids=
tokenizer = get_chat_template(
    tokenizer,
    chat_template="phi-3",
    mapping={"role": "from", "content": "value", "user": "human", "assistant": "gpt"},
)
FastLanguageModel.for_inference(model)
messages = [{"from": "human", "value": "Continue the fibonacci sequence: 1, 1, 2, 3, 5, 8,"}]
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
outputs = model.generate(input_ids=inputs, max_new_tokens=64, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [12] stream the same prompt
FastLanguageModel.for_inference(model)
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(input_ids=inputs, streamer=text_streamer, max_new_tokens=128, use_cache=True)

# %% [13] save the adapters and the tokenizer
model.save_pretrained("phi_lora")
tokenizer.save_pretrained("phi_lora")

# %% [14] reload (the notebook's `if False:` turned on) and stream with the saved template
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="phi_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
messages = [{"from": "human", "value": "What is a famous tall tower in Paris?"}]
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(input_ids=inputs, streamer=text_streamer, max_new_tokens=128, use_cache=True)

# %% [15] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [16] merged 16-bit and LoRA saves (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("phi_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("phi_lora")
tokenizer.save_pretrained("phi_lora")

# %% [17] GGUF saves (turned on: q8_0 and f16); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("phi_finetune", tokenizer)
model.save_pretrained_gguf("phi_finetune", tokenizer, quantization_method="f16")
