"""The Zephyr (7B) DPO notebook's calls, in its order, on the tiny llama under its Hub id (see README).

Cell titles give the notebook's code-cell number. The preference rows come from a local file in
ultrafeedback_binarized's columns (the notebook samples 0.5% of the real set; the stand-in is used whole), and
training is cut to a few steps.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare, write_preference_datasets  # noqa: E402

prepare({"unsloth/zephyr-sft-bnb-4bit": "zephyr"})
DATA = write_preference_datasets(Path.cwd() / "preference-data")
STEPS = 3

# %% [1] patch the DPO trainer
from unsloth import PatchDPOTrainer  # noqa: E402

PatchDPOTrainer()

# %% [2] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402, F401

max_seq_length = 4096
dtype = None
load_in_4bit = True
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/zephyr-sft-bnb-4bit", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)

# %% [3] helpers that load the mixture and render each comparison as prompt / chosen / rejected text
import re  # noqa: E402

from datasets import DatasetDict, load_dataset  # noqa: E402


def get_datasets(mixture, splits):
    """Each split of each dataset in `mixture`, read from its local stand-in (the stand-ins are small: kept whole)."""
    loaded = {}
    for split in splits:
        name = "train" if "train" in split else "test"
        parts = [load_dataset("json", data_files=DATA[f"{dataset}:{split}"], split="train") for dataset in mixture]
        loaded[name] = parts[0]
    return DatasetDict(loaded)


def apply_chat_template(example, tokenizer, task="sft", assistant_prefix="<|assistant|>\n"):
    """The comparison's shared turns as the prompt, each side's last turn as its completion, all as template text."""
    if task != "dpo":
        raise ValueError(f"only the 'dpo' task is used here, got {task!r}")
    prompt_turns = example["chosen"][:-1]
    if prompt_turns[0]["role"] != "system":
        prompt_turns = [{"role": "system", "content": ""}, *prompt_turns]
    rendered = {}
    for side in ("chosen", "rejected"):
        text = tokenizer.apply_chat_template(example[side][-1:], tokenize=False)
        rendered[f"text_{side}"] = re.sub(f"^{re.escape(assistant_prefix)}", "", text)
    rendered["text_prompt"] = tokenizer.apply_chat_template(prompt_turns, tokenize=False, add_generation_prompt=True)
    return rendered


# %% [4] load a small part of ultrafeedback and render it
raw_datasets = get_datasets({"HuggingFaceH4/ultrafeedback_binarized": 0.005}, splits=["train_prefs", "test_prefs"])
column_names = list(raw_datasets["train"].features)
raw_datasets = raw_datasets.map(
    apply_chat_template,
    fn_kwargs={"tokenizer": tokenizer, "task": "dpo"},
    num_proc=12,
    remove_columns=column_names,
    desc="Formatting comparisons with prompt template",
)
for split in ["train", "test"]:
    raw_datasets[split] = raw_datasets[split].rename_columns(
        {"text_prompt": "prompt", "text_chosen": "chosen", "text_rejected": "rejected"}
    )

# %% [5] print one comparison
import pprint  # noqa: E402

row = raw_datasets["train"][8]
pprint.pprint(row["prompt"])
pprint.pprint(row["chosen"])
pprint.pprint(row["rejected"])

# %% [6] LoRA adapters
model = FastLanguageModel.get_peft_model(
    model,
    r=64,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=64,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [7] patch the DPO trainer again, as the notebook does
from unsloth import PatchDPOTrainer  # noqa: E402

PatchDPOTrainer()

# %% [8] DPOTrainer with the notebook's keywords (max_steps cuts the three epochs short)
from transformers import TrainingArguments  # noqa: E402, F401
from trl import DPOConfig, DPOTrainer  # noqa: E402

dpo_trainer = DPOTrainer(
    model=model,
    ref_model=None,
    args=DPOConfig(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        warmup_ratio=0.1,
        num_train_epochs=3,
        max_steps=STEPS,
        learning_rate=5e-6,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.0,
        lr_scheduler_type="linear",
        seed=42,
        output_dir="outputs",
        report_to="none",
    ),
    beta=0.1,
    train_dataset=raw_datasets["train"],
    tokenizer=tokenizer,
    max_length=1024,
    max_prompt_length=512,
)

# %% [9] train
dpo_trainer.train()
print(dpo_trainer.state.log_history[0])
