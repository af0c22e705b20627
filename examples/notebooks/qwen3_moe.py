"""The Qwen3 MoE (30B-A3B Instruct 2507) notebook's calls, in its order, on a tiny Qwen 3 MoE (mlx-lm's
`qwen3_moe`: four SwitchGLU experts, two per token, in every block) under its Hub id.

Cell titles give the notebook's code-cell number. The OpenMathReasoning rows come from a local file in its columns;
the context is 512 tokens and training a few steps. LoRA names "gate_up_proj" beside the split projections, as the
notebook does for transformers 5's fused experts; on MLX the experts' own projections take it.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Qwen3-30B-A3B-Instruct-2507": ("qwen3_moe", "qwen3-instruct")})
STEPS = 3

# %% [1] imports; the MoE backend switch stays commented out as published
import os  # noqa: E402, F401
import torch  # noqa: E402

# %% [2] model name, context and rank
model_name = "unsloth/Qwen3-30B-A3B-Instruct-2507"
max_seq_length = 512
lora_rank = 32

# %% [3] load in 16 bits without vLLM, then LoRA on attention and on the experts
from unsloth import FastLanguageModel  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name,
    max_seq_length=max_seq_length,
    load_in_4bit=False,
    fast_inference=False,
)

model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj"],
    lora_alpha=lora_rank * 2,
    use_gradient_checkpointing=True,
    random_state=3407,
    bias="none",
)

# %% [4] the reasoning markers and the system prompt
reasoning_start = "<start_working_out>"
reasoning_end = "<end_working_out>"
solution_start = "<SOLUTION>"
solution_end = "</SOLUTION>"

system_prompt = f"""You are given a problem.
Think about the problem and provide your working out.
Place it between {reasoning_start} and {reasoning_end}.
Then, provide your solution between {solution_start}{solution_end}"""
print(system_prompt)

# %% [5] a template that opens the working-out section
chat_template = (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] + eos_token }}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}"
    "{{ '{system_prompt}' + eos_token }}"
    "{% set loop_messages = messages %}"
    "{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'user' %}"
    "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '{reasoning_start}' }}"
    "{% endif %}"
)
chat_template = chat_template.replace("'{system_prompt}'", f"'{system_prompt}'").replace(
    "'{reasoning_start}'", f"'{reasoning_start}'"
)
tokenizer.chat_template = chat_template

# %% [6] a short exchange rendered
print(
    tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "What is 1+1?"},
            {
                "role": "assistant",
                "content": f"{reasoning_start}I think it's 2.{reasoning_end}{solution_start}2{solution_end}",
            },
            {"role": "user", "content": "What is 2+2?"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
)

# %% [7] the maths rows with numeric answers
from datasets import load_dataset  # noqa: E402
import pandas as pd  # noqa: E402
import numpy as np  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")
dataset = dataset.to_pandas()[["expected_answer", "problem", "generated_solution"]]
is_number = pd.to_numeric(pd.Series(dataset["expected_answer"]), errors="coerce").notnull()
dataset = dataset.iloc[np.where(is_number)[0]]
print(dataset)


# %% [8] each row in the reasoning format (the local answers are numbers, so str() them)
def format_dataset(x):
    expected_answer = str(x["expected_answer"])
    problem = x["problem"]
    thoughts = x["generated_solution"].replace("<think>", "").replace("</think>", "").strip()
    final_prompt = reasoning_start + thoughts + reasoning_end + solution_start + expected_answer + solution_end
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": problem},
        {"role": "assistant", "content": final_prompt},
    ]


dataset["Messages"] = dataset.apply(format_dataset, axis=1)

# %% [9] one rendered row
print(tokenizer.apply_chat_template(dataset["Messages"][0], tokenize=False))

# %% [10] keep the rows that fit half the context; len() of the ids, as transformers 4.56 returned them
dataset["N"] = dataset["Messages"].apply(lambda x: len(tokenizer.apply_chat_template(x)))
dataset = dataset.loc[dataset["N"] <= max_seq_length / 2].copy()
print(dataset.shape)

# %% [11] the text column
from datasets import Dataset  # noqa: E402

dataset["text"] = tokenizer.apply_chat_template(dataset["Messages"].values.tolist(), tokenize=False)
dataset = Dataset.from_pandas(dataset)
print(dataset)

# %% [12] SFTTrainer
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
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

# %% [13] train
trainer.train()

# %% [14] the format after training
text = tokenizer.apply_chat_template(dataset[0]["Messages"][:2], tokenize=False, add_generation_prompt=True)

from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=0.1,
    max_new_tokens=32,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
    use_cache=True,
)

# %% [15] free memory
del dataset
torch.cuda.empty_cache()
import gc  # noqa: E402

gc.collect()

# %% [16] merged 16-bit save and the LoRA adapters (turned on); the 4-bit merge and the pushes stay off
model.save_pretrained_merged("qwen_finetune_16bit", tokenizer, save_method="merged_16bit")
model.save_pretrained("qwen_lora")
tokenizer.save_pretrained("qwen_lora")

# %% [17] GGUF saves (q8_0 and f16 turned on); q4_k_m and the pushes stay off as published
model.save_pretrained_gguf("qwen_finetune", tokenizer)
model.save_pretrained_gguf("qwen_finetune", tokenizer, quantization_method="f16")
