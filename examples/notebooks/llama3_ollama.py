"""The Llama 3 (8B) Ollama notebook's calls, in its order, on a tiny llama under its Hub id (see README).

Cell titles give the notebook's code-cell number. The dataset comes from a local file in alpaca-gpt4's columns;
training is cut to a few steps. `to_sharegpt` merges the columns into turns, `standardize_sharegpt` and the
dataset-level `apply_chat_template` render them, and the GGUF save writes Ollama's Modelfile. The cells that
install and serve Ollama, and the `!ollama` / `!curl` shell cells, need the Ollama program: they are not run.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/llama-3-8b-bnb-4bit": ("llama", None)})
STEPS = 3

# %% [1] load the pre-quantized 4-bit id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 2048
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/llama-3-8b-bnb-4bit", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
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

# %% [3] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["vicgalle/alpaca-gpt4"], split="train")

# %% [4] its columns
print(dataset.column_names)

# %% [5] to_sharegpt: one prompt from several columns ([[...]] drops when `input` is empty), three rows a turn
from unsloth import to_sharegpt  # noqa: E402

dataset = to_sharegpt(
    dataset,
    merged_prompt="{instruction}[[\nThe input is:\n{input}]]",
    output_column_name="output",
    conversation_extension=3,
)

# %% [6] standardize_sharegpt
from unsloth import standardize_sharegpt  # noqa: E402

dataset = standardize_sharegpt(dataset)

# %% [7] an Alpaca-style prompt string (kept for reference by the notebook)
alpaca_prompt = "Task:\n{}\n\nGiven:\n{}\n\nReply:\n{}"

# %% [8] a prompt-style chat template ({INPUT} / {OUTPUT}) applied over the dataset
chat_template = "Answer each request below as asked.\n\n{INPUT}\n\n{OUTPUT}"

from unsloth import apply_chat_template  # noqa: E402

dataset = apply_chat_template(dataset, tokenizer=tokenizer, chat_template=chat_template)

# %% [9] SFTTrainer
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

# %% [10] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"{gpu_stats.name}: {max_memory} GB, {start_gpu_memory} GB reserved")

# %% [11] train
trainer_stats = trainer.train()

# %% [12] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [13] generate from the tokenized template (a tensor of ids), passed positionally
from transformers import TextStreamer  # noqa: E402

FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "Continue the fibonacci sequence! The input is 1, 1, 2, 3, 5, 8,"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt").to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(input_ids, streamer=text_streamer, max_new_tokens=128, pad_token_id=tokenizer.eos_token_id)

# %% [14] a three-turn conversation
FastLanguageModel.for_inference(model)
messages = [
    {"role": "user", "content": "Continue the fibonacci sequence! The input is 1, 1, 2, 3, 5, 8"},
    {"role": "assistant", "content": "It goes on 13, 21, 34, 55 and 89."},
    {"role": "user", "content": "What is the tallest tower in France called?"},
]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt").to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(input_ids, streamer=text_streamer, max_new_tokens=128, pad_token_id=tokenizer.eos_token_id)

# %% [15] save the adapters and the tokenizer
model.save_pretrained("llama_lora")
tokenizer.save_pretrained("llama_lora")

# %% [16] generate again (the reload above it stays under `if False:` as published: a reloaded tokenizer has no
# `_ollama_modelfile`, so the GGUF save below would write the family table's Modelfile, without this prompt)
FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "Describe anything special about a sequence. The input is 1, 1, 2, 3, 5, 8,"}]
input_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt").to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(input_ids, streamer=text_streamer, max_new_tokens=128, pad_token_id=tokenizer.eos_token_id)

# %% [17] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [18] install Ollama (shell: apt-get and Ollama's installer; not run)

# %% [19] the q8_0 GGUF save the notebook leaves on, with its Modelfile; the other saves and pushes stay off
model.save_pretrained_gguf("llama_finetune", tokenizer)
assert "TEMPLATE" in (Path("llama_finetune") / "Modelfile").read_text(encoding="utf-8")

# %% [20] start `ollama serve` and wait for it (needs the Ollama program; not run)

# %% [21] the Modelfile kept on the tokenizer
print(tokenizer._ollama_modelfile)

# %% [22] `!ollama create` (shell; not run)

# %% [23] `!curl` to Ollama's chat endpoint (shell; not run)
