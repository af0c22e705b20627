"""The Mistral (7B) text-completion notebook's calls, in its order, on a tiny mistral under its Hub id (see README).

Cell titles give the notebook's code-cell number. The stories come from a local file in TinyStories' columns; the
epoch is cut to a few steps. The LoRA targets include `embed_tokens` and `lm_head`, and the last cell streams
from a thread through `TextIteratorStreamer`.
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
HEAD_BEFORE = model.lm_head.weight.tolist()

# %% [4] the first rows of the stories, each closed by the EOS
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["roneneldan/TinyStories"], split="train[:100]")
EOS_TOKEN = tokenizer.eos_token


def formatting_prompts_func(examples):
    return {"text": [story + EOS_TOKEN for story in examples["text"]]}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [5] print a few rows
for row in dataset[:5]["text"]:
    print("-" * 20)
    print(row)

# %% [6] UnslothTrainer: warmup ratio, one epoch (cut short), cosine schedule, embedding learning rate
from trl import SFTTrainer  # noqa: E402, F401
from transformers import TrainingArguments  # noqa: E402, F401
from unsloth import UnslothTrainer, UnslothTrainingArguments  # noqa: E402

trainer = UnslothTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    dataset_text_field="text",
    max_seq_length=max_seq_length,
    dataset_num_proc=8,
    args=UnslothTrainingArguments(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=8,
        warmup_ratio=0.1,
        num_train_epochs=1,
        max_steps=STEPS,
        learning_rate=5e-5,
        embedding_learning_rate=5e-6,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.00,
        lr_scheduler_type="cosine",
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

# %% [8] train; the output matrix is trained, not only logged about
trainer_stats = trainer.train()
assert model.lm_head.weight.tolist() != HEAD_BEFORE, "lm_head did not train"

# %% [9] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(
    trainer_stats.metrics["train_runtime"], used_memory, round((used_memory - start_gpu_memory) / max_memory * 100, 3)
)

# %% [10] generate on a thread, reading the text from a TextIteratorStreamer and wrapping it
from threading import Thread  # noqa: E402
import textwrap  # noqa: E402

from transformers import TextIteratorStreamer  # noqa: E402

text_streamer = TextIteratorStreamer(tokenizer)
max_print_width = 100
FastLanguageModel.for_inference(model)
inputs = tokenizer(["Once upon a time, in a galaxy, far far away,"] * 1, return_tensors="pt").to("cuda")
generation_kwargs = dict(inputs, streamer=text_streamer, max_new_tokens=256, use_cache=True)
thread = Thread(target=model.generate, kwargs=generation_kwargs)
thread.start()
streamed = []
for piece in text_streamer:
    streamed.append(piece)
thread.join()
print("\n".join(textwrap.wrap("".join(streamed), width=max_print_width)))
assert streamed, "the streamer gave no text"
