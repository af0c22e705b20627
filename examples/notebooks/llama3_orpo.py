"""The Llama 3 (8B) ORPO notebook's calls, in its order, on the tiny llama under its Hub id (see README).

Cell titles give the notebook's code-cell number. The preference rows come from a local file in
dolphin-sft-v0.1-preference's columns; training is cut to a few steps. The cells the notebook leaves off with
`if False:` run where they work offline (reload, 16-bit merge, GGUF q8_0 and f16).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare, write_preference_datasets  # noqa: E402

prepare({"unsloth/llama-3-8b-bnb-4bit": None})
DATA = write_preference_datasets(Path.cwd() / "preference-data")
STEPS = 3

# %% [1] load in 4 bits by Hub id
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402, F401

max_seq_length = 4096
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

# %% [3] alpaca-style prompt with an EOS-closed answer on each side, and the dataset
instruction_prompt = """An instruction and its input follow; answer the instruction.

### Instruction:
{}

### Input:
{}

### Response:
{}"""

EOS_TOKEN = tokenizer.eos_token


def to_preference_row(sample):
    sample["prompt"] = instruction_prompt.format(sample["instruction"], sample["input"], "")
    sample["chosen"] = sample["accepted"] + EOS_TOKEN
    sample["rejected"] = sample["rejected"] + EOS_TOKEN
    return sample


from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["reciperesearch/dolphin-sft-v0.1-preference"])["train"]
dataset = dataset.map(to_preference_row)

# %% [4] print one row
import pprint  # noqa: E402

row = dataset[1]
print("PROMPT", "=" * 20)
pprint.pprint(row["prompt"])
print("CHOSEN", "=" * 20)
pprint.pprint(row["chosen"])
print("REJECTED", "=" * 20)
pprint.pprint(row["rejected"])

# %% [5] patch the DPO trainer (the reward statistics)
from unsloth import PatchDPOTrainer  # noqa: E402

PatchDPOTrainer()

# %% [6] ORPOTrainer with the notebook's keywords
from trl import ORPOConfig, ORPOTrainer  # noqa: E402

orpo_trainer = ORPOTrainer(
    model=model,
    train_dataset=dataset,
    tokenizer=tokenizer,
    args=ORPOConfig(
        max_length=max_seq_length,
        max_prompt_length=max_seq_length // 2,
        max_completion_length=max_seq_length // 2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        beta=0.1,
        logging_steps=1,
        optim="adamw_8bit",
        lr_scheduler_type="linear",
        max_steps=STEPS,
        output_dir="outputs",
        report_to="none",
    ),
)

# %% [7] train
orpo_trainer.train()

# %% [8] generate
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [instruction_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
outputs = model.generate(**inputs, max_new_tokens=64, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [9] stream with TextStreamer
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [instruction_prompt.format("Continue the fibonacci sequence.", "1, 1, 2, 3, 5, 8", "")], return_tensors="pt"
).to("cuda")
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer)
_ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=128)

# %% [10] save the adapters and the tokenizer
model.save_pretrained("llama_lora")
tokenizer.save_pretrained("llama_lora")

# %% [11] reload (the notebook's `if False:` turned on) and generate
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="llama_lora", max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit
)
FastLanguageModel.for_inference(model)
inputs = tokenizer(
    [instruction_prompt.format("What is a famous tall tower in Paris?", "", "")], return_tensors="pt"
).to("cuda")
outputs = model.generate(**inputs, max_new_tokens=64, use_cache=True)
print(tokenizer.batch_decode(outputs))

# %% [12] peft's AutoPeftModelForCausalLM (`if False:` in the notebook; CUDA only, not run)

# %% [13] merged 16-bit save (turned on); 4-bit merge and pushes stay off as published
model.save_pretrained_merged("llama_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [14] GGUF saves (turned on: q8_0 and f16); q4_k_m and pushes stay off as published
model.save_pretrained_gguf("llama_finetune", tokenizer)
model.save_pretrained_gguf("llama_finetune", tokenizer, quantization_method="f16")
