"""The Qwen3 (4B) GRPO notebook's calls, in its order, on the tiny llama under its Hub id: the vLLM-style load
(`fast_inference=True`), the SFT warm-up on the notebook's format, GRPO with its four reward functions, then
`fast_generate`, `save_lora`, the safetensors check and `load_lora`.

Cell titles give the notebook's code-cell number. Both datasets come from local files in their columns; the
context is 512 tokens (the tiny model's) instead of 2048 and each training run a few steps.
"""

# %% [0] setup in place of the install cells
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare  # noqa: E402

DATA = prepare({"unsloth/Qwen3-4B-Base": None})
STEPS = 3
DAPO_FILE = Path("dapo-math.jsonl")
DAPO_FILE.write_text(
    "".join(json.dumps({"prompt": f"What is {n} plus {n}?", "solution": str(2 * n)}) + "\n" for n in range(24)),
    encoding="utf-8",
)

# %% [2] load with vLLM's keywords, then LoRA
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 512
lora_rank = 32

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Qwen3-4B-Base",
    max_seq_length=max_seq_length,
    load_in_4bit=False,
    fast_inference=True,
    max_lora_rank=lora_rank,
    gpu_memory_utilization=0.9,
)

model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=lora_rank * 2,
    use_gradient_checkpointing="unsloth",
    random_state=3407,
)

# %% [3] the reasoning markers and the system prompt
reasoning_start = "<start_working_out>"
reasoning_end = "<end_working_out>"
solution_start = "<SOLUTION>"
solution_end = "</SOLUTION>"

system_prompt = f"""You are given a problem.
Think about the problem and provide your working out.
Place it between {reasoning_start} and {reasoning_end}.
Then, provide your solution between {solution_start}{solution_end}"""
print(system_prompt)

# %% [4] a chat template that opens the working-out section
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

# %% [5] render a short exchange
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

# %% [6] the SFT warm-up rows, numeric answers only
from datasets import load_dataset  # noqa: E402
import pandas as pd  # noqa: E402
import numpy as np  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")
dataset = dataset.to_pandas()[["expected_answer", "problem", "generated_solution"]]
is_number = pd.to_numeric(pd.Series(dataset["expected_answer"]), errors="coerce").notnull()
dataset = dataset.iloc[np.where(is_number)[0]]
print(dataset)


# %% [7] each row in the reasoning format
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

# %% [8] one rendered row
tokenizer.apply_chat_template(dataset["Messages"][0], tokenize=False)

# %% [9] keep rows that fit half the context (return_dict=False: transformers 5 returns a dict by default)
dataset["N"] = dataset["Messages"].apply(lambda x: len(tokenizer.apply_chat_template(x, return_dict=False)))
dataset = dataset.loc[dataset["N"] <= max_seq_length / 2].copy()
print(dataset.shape)

# %% [10] the text column
from datasets import Dataset  # noqa: E402

dataset["text"] = tokenizer.apply_chat_template(dataset["Messages"].values.tolist(), tokenize=False)
dataset = Dataset.from_pandas(dataset)
print(dataset)

# %% [11] the SFT trainer
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
        logging_steps=5,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        report_to="none",
    ),
)

# %% [12] train
trainer.train()

# %% [13] check the format after the warm-up
text = tokenizer.apply_chat_template(dataset[0]["Messages"][:2], tokenize=False, add_generation_prompt=True)

from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=0,
    max_new_tokens=32,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
)

# %% [14] free memory
del dataset
torch.cuda.empty_cache()
import gc  # noqa: E402

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

# %% [20] the format regex, with the optional end-of-sequence token
import re  # noqa: E402

solution_end_regex = r"</SOLUTION>[\s]{0,}" + "(?:" + re.escape(tokenizer.eos_token) + ")?"
match_format = re.compile(
    rf"{reasoning_end}.*?{solution_start}(.+?){solution_end_regex}[\s]{{0,}}$", flags=re.MULTILINE | re.DOTALL
)
print(match_format)

# %% [21] it matches
match_format.findall("Let me think!<end_working_out><SOLUTION>\n2\n</SOLUTION>")

# %% [22] it matches with spaces
match_format.findall("<start_working_out>Let me think!<end_working_out><SOLUTION>  2  </SOLUTION>\n\n")


# %% [23] reward: the exact format
def match_format_exactly(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        scores.append(3.0 if match_format.search(response) is not None else 0)
    return scores


# %% [24] reward: the markers seen once each
def match_format_approximately(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        score = 0
        score += 0.5 if response.count(reasoning_end) == 1 else -1.0
        score += 0.5 if response.count(solution_start) == 1 else -1.0
        score += 0.5 if response.count(solution_end) == 1 else -1.0
        scores.append(score)
    return scores


# %% [25] reward: the answer, exact or close
def check_answer(prompts, completions, answer, **kwargs):
    responses = [completion[0]["content"] for completion in completions]
    extracted = [guess.group(1) if (guess := match_format.search(r)) is not None else None for r in responses]
    scores = []
    for guess, true_answer in zip(extracted, answer):
        if guess is None:
            scores.append(-2.0)
            continue
        if guess == true_answer:
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
match_numbers = re.compile(solution_start + r".*?[\s]{0,}([-]?[\d\.\,]{1,})", flags=re.MULTILINE | re.DOTALL)
print(match_numbers.findall("<SOLUTION>  0.34  </SOLUTION>"))
print(match_numbers.findall("<SOLUTION>  123,456  </SOLUTION>"))

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


# %% [28] prompt lengths, keeping the shortest 90% (return_dict=False, as in cell 9)
tokenized = dataset.map(
    lambda x: {
        "tokens": tokenizer.apply_chat_template(
            x["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
    },
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
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="linear",
    optim="adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=1,
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

# %% [31] the base model without the adapter
text = "What is the sqrt of 101?"
sampling_params = SamplingParams(temperature=1.0, top_k=50, max_tokens=64)
output = model.fast_generate([text], sampling_params=sampling_params, lora_request=None)[0].outputs[0].text
print(output)

# %% [32] save the GRPO adapter
model.save_lora("grpo_saved_lora")

# %% [33] both LoRA matrices are non-zero
from safetensors import safe_open  # noqa: E402

with safe_open("grpo_saved_lora/adapter_model.safetensors", framework="pt") as f:
    for key in f.keys():
        tensor = f.get_tensor(key)
        n_zeros = (tensor == 0).sum() / tensor.numel()
        assert n_zeros.item() != tensor.numel()

# %% [34] the trained adapter, loaded back
messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "What is the sqrt of 101?"}]
text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
sampling_params = SamplingParams(temperature=1.0, top_k=50, max_tokens=64)
output = (
    model.fast_generate(text, sampling_params=sampling_params, lora_request=model.load_lora("grpo_saved_lora"))[0]
    .outputs[0]
    .text
)
print(output)

# %% [35] saving, off as published
if False:
    model.save_pretrained_merged("qwen_finetune_16bit", tokenizer, save_method="merged_16bit")
