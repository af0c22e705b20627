"""The LFM2.5 (1.2B) GRPO notebook's calls, in its order, on a tiny LFM2 (mlx-lm's `lfm2`: short convolutions
between attention blocks) under its Hub id, with a ChatML-style template: the load with `load_in_fp8 = False`,
LoRA on Liquid's projection names, the SFT warm-up, GRPO with its four rewards, `save_lora` and the check.

Cell titles give the notebook's code-cell number. Both datasets come from local files in their columns; the
context is 512 tokens instead of 4096 and each training run a few steps.
"""

# %% [0] setup in place of the install cells
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/LFM2.5-1.2B-Instruct": ("lfm2", "lfm2")})
STEPS = 3
DAPO_FILE = Path("dapo-math.jsonl")
DAPO_FILE.write_text(
    "".join(json.dumps({"prompt": f"What is {n} plus {n}?", "solution": str(2 * n)}) + "\n" for n in range(24)),
    encoding="utf-8",
)

# %% [1] standby switch, then the load (fp8 and vLLM off) and LoRA on Liquid's names
import os  # noqa: E402

os.environ["UNSLOTH_VLLM_STANDBY"] = "1"
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 512
lora_rank = 32

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/LFM2.5-1.2B-Instruct",
    max_seq_length=max_seq_length,
    load_in_4bit=False,
    fast_inference=False,
    max_lora_rank=lora_rank,
    load_in_fp8=False,
)

model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"],
    lora_alpha=lora_rank * 2,
    use_gradient_checkpointing="unsloth",
    random_state=3407,
)

# %% [2] the base model answers a chat prompt, the inputs moved to model.device
messages = [{"role": "user", "content": "Solve x^5 + 3x^4 - 10 = 3."}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True).to(
    model.device
)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(**inputs, max_new_tokens=32, use_cache=True, streamer=TextStreamer(tokenizer))

# %% [3] the think markers and the system prompt
reasoning_start = "<think>"
reasoning_end = "</think>"
system_prompt = (
    f"Think step by step between {reasoning_start} and {reasoning_end} and then"
    "output your answer. Output the final answer in \\boxed{} format."
)
print(system_prompt)

# %% [4] the model's own template on an exchange with a system turn
print(
    tokenizer.apply_chat_template(
        [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": "What is 1+1?"},
            {"role": "assistant", "content": f"{reasoning_start}I think it's 2.{reasoning_end}2"},
            {"role": "user", "content": "What is 2+2?"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
)

# %% [5] the warm-up rows, numeric answers only
from datasets import load_dataset  # noqa: E402
import pandas as pd  # noqa: E402
import numpy as np  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")
dataset = dataset.to_pandas()[["expected_answer", "problem", "generated_solution"]]
is_number = pd.to_numeric(pd.Series(dataset["expected_answer"]), errors="coerce").notnull()
dataset = dataset.iloc[np.where(is_number)[0]]
print(dataset)


# %% [6] each row as system, user and the solution as the answer
def format_dataset(x):
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": x["problem"]},
        {"role": "assistant", "content": x["generated_solution"]},
    ]


dataset["Messages"] = dataset.apply(format_dataset, axis=1)

# %% [7] one rendered row
print(tokenizer.apply_chat_template(dataset["Messages"][0], tokenize=False))

# %% [8] rows that fit half the context, by len() of the ids
dataset["N"] = dataset["Messages"].apply(lambda x: len(tokenizer.apply_chat_template(x)))
dataset = dataset.loc[dataset["N"] <= max_seq_length / 2].copy()
print(dataset.shape)

# %% [9] the text column
from datasets import Dataset  # noqa: E402

dataset["text"] = tokenizer.apply_chat_template(dataset["Messages"].values.tolist(), tokenize=False)
dataset = Dataset.from_pandas(dataset)
print(dataset)

# %% [10] the SFT trainer, batches of 8
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        warmup_steps=10,
        max_steps=STEPS,
        learning_rate=2e-4,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.01,
        lr_scheduler_type="linear",
        seed=3407,
        report_to="none",
    ),
)

# %% [11] train
trainer.train()

# %% [12] free memory five times over
import gc  # noqa: E402

for _ in range(5):
    torch.cuda.empty_cache()
    gc.collect()

# %% [13] generate from the tokenized text, moved to "cuda"
text = tokenizer.apply_chat_template(dataset[0]["Messages"][:2], tokenize=False, add_generation_prompt=True)
_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=1,
    max_new_tokens=32,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
)

# %% [14] free memory
del dataset
torch.cuda.empty_cache()
gc.collect()

# %% [15] the GRPO dataset
dataset = load_dataset("json", data_files=str(DAPO_FILE), split="train")
print(dataset)

# %% [16] a prompt
dataset[0]["prompt"]

# %% [17] its solution
dataset[0]["solution"]


# %% [18] the answer is the solution itself
def extract_hash_answer(text):
    return text


extract_hash_answer(dataset[0]["solution"])

# %% [19] conversational prompts with the system prompt
dataset = dataset.map(
    lambda x: {
        "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": x["prompt"]}],
        "answer": extract_hash_answer(x["solution"]),
    }
)
dataset[0]

# %% [20] the boxed-answer regex after the think-close tag, with the optional EOS
import re  # noqa: E402

solution_end_regex = r"</think>[\s]*" + "(?:" + re.escape(tokenizer.eos_token) + ")?"
match_format = re.compile(
    r"</think>[\s]*" r".*?" r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}" r"[\s]*$",
    flags=re.MULTILINE | re.DOTALL,
)
print(match_format)

# %% [21] it matches
print(match_format.findall("<think>Let me think!</think>\\boxed{2}"))

# %% [22] it matches with trailing space
print(match_format.findall("<think>Let me think!</think>\\boxed{2}  \n\n"))


# %% [23] reward: the exact format
def match_format_exactly(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        scores.append(3.0 if match_format.search(response) is not None else 0)
    return scores


# %% [24] reward: each think marker once
def match_format_approximately(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        score = 0.5 if response.count(reasoning_start) == 1 else -1.0
        score += 0.5 if response.count(reasoning_end) == 1 else -1.0
        scores.append(score)
    return scores


# %% [25] reward: the boxed answer, exact or close
def check_answer(prompts, completions, answer, **kwargs):
    responses = [completion[0]["content"] for completion in completions]
    extracted = [guess.group(1) if (guess := match_format.search(r)) is not None else None for r in responses]
    scores = []
    for guess, true_answer in zip(extracted, answer):
        if guess is None:
            scores.append(-2.0)
        elif guess == true_answer:
            scores.append(5.0)
        elif guess.strip() == true_answer.strip():
            scores.append(3.5)
        else:
            try:
                ratio = float(guess) / float(true_answer)
                scores.append(2.0 if 0.9 <= ratio <= 1.1 else 1.5 if 0.8 <= ratio <= 1.2 else -2.5)
            except (ValueError, ZeroDivisionError):
                scores.append(-4.5)
    return scores


# %% [26] the number regex
match_numbers = re.compile(r".*?[\s]{0,}([-]?[\d\.\,]{1,})", flags=re.MULTILINE | re.DOTALL)
print(match_numbers.findall("\\boxed{0.34}"))
print(match_numbers.findall("The answer is -0.234"))

# %% [27] reward: the number, printed every few calls
PRINTED_TIMES = 0
PRINT_EVERY_STEPS = 5


def check_numbers(prompts, completions, answer, **kwargs):
    global PRINTED_TIMES
    question = prompts[0][-1]["content"]
    responses = [completion[0]["content"] for completion in completions]
    extracted = [guess.group(1) if (guess := match_numbers.search(r)) is not None else None for r in responses]
    if PRINTED_TIMES % PRINT_EVERY_STEPS == 0:
        print("*" * 20 + f"Question:\n{question}", f"\nAnswer:\n{answer[0]}", f"\nResponse:\n{responses[0]}")
    PRINTED_TIMES += 1
    scores = []
    for guess, true_answer in zip(extracted, answer):
        if guess is None:
            scores.append(-2.5)
            continue
        try:
            scores.append(3.5 if float(guess.strip().replace(",", "")) == float(true_answer.strip()) else -1.5)
        except ValueError:
            scores.append(0)
    return scores


# %% [28] prompt lengths by tokenizing in a batched map, keeping the shortest 90%
tokenized = dataset.map(
    lambda x: {"tokens": tokenizer.apply_chat_template(x["prompt"], add_generation_prompt=True, tokenize=True)},
    batched=True,
)
print(tokenizer.decode(tokenized[0]["tokens"]))
tokenized = tokenized.map(lambda x: {"L": len(x["tokens"])})
maximum_length = int(np.quantile(tokenized["L"], 0.9))
print("Max Length = ", maximum_length)
dataset = dataset.select(np.where(np.array(tokenized["L"]) <= maximum_length)[0])
del tokenized

# %% [29] vLLM's sampling parameters and the GRPO config
max_prompt_length = maximum_length + 1
max_completion_length = max_seq_length - max_prompt_length

from vllm import SamplingParams  # noqa: E402

vllm_sampling_params = SamplingParams(
    min_p=0.1, top_p=1.0, top_k=-1, seed=3407, stop=[tokenizer.eos_token], include_stop_str_in_output=True
)

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

training_args = GRPOConfig(
    vllm_sampling_params=vllm_sampling_params,
    temperature=1.0,
    learning_rate=5e-6,
    weight_decay=0.01,
    warmup_ratio=0.1,
    lr_scheduler_type="linear",
    optim="adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    num_generations=4,
    max_prompt_length=max_prompt_length,
    max_completion_length=max_completion_length,
    max_steps=STEPS,
    save_steps=100,
    report_to="none",
    output_dir="outputs",
)

# %% [30] GRPO with the four rewards
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[match_format_exactly, match_format_approximately, check_answer, check_numbers],
    args=training_args,
    train_dataset=dataset,
)
trainer.train()

# %% [31] generate with the notebook's sampling settings
messages = [{"role": "user", "content": "What is the sqrt of 101?"}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True).to(
    model.device
)
_ = model.generate(
    **inputs,
    temperature=0.1,
    top_k=50,
    top_p=0.1,
    repetition_penalty=1.05,
    max_new_tokens=32,
    use_cache=True,
    streamer=TextStreamer(tokenizer),
)

# %% [32] save the GRPO adapter
model.save_lora("grpo_saved_lora")

# %% [33] both LoRA matrices are non-zero
from safetensors import safe_open  # noqa: E402

with safe_open("grpo_saved_lora/adapter_model.safetensors", framework="pt") as f:
    for key in f.keys():
        tensor = f.get_tensor(key)
        n_zeros = (tensor == 0).sum() / tensor.numel()
        assert n_zeros.item() != tensor.numel()

# %% [34] with the system prompt
messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "What is the sqrt of 101?"}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True).to(
    model.device
)
_ = model.generate(
    **inputs,
    temperature=0.1,
    top_k=50,
    top_p=0.1,
    repetition_penalty=1.05,
    max_new_tokens=32,
    use_cache=True,
    streamer=TextStreamer(tokenizer),
)

# %% [35] saving, off as published
if False:
    model.save_pretrained_merged("lfm_finetune_16bit", tokenizer, save_method="merged_16bit")
