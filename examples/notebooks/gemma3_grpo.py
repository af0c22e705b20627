"""The Gemma 3 (1B) GRPO notebook's calls, in its order, through `FastModel`, on the tiny llama under its Hub id
with Gemma 3's chat template: GSM8K-style prompts with a system prompt, the notebook's four reward functions, GRPO,
then generation and saving.

Cell titles give the notebook's code-cell number. The dataset comes from a local file in GSM8K's columns; the
context is 512 tokens (the tiny model's) and training a few steps.
"""

# %% [0] setup in place of the install cells
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare  # noqa: E402

DATA = prepare({"unsloth/gemma-3-1b-it": "gemma-3"})
STEPS = 3
GSM8K_FILE = Path("gsm8k.jsonl")
GSM8K_FILE.write_text(
    "".join(
        json.dumps(
            {"question": f"Ann has {n} apples and buys {n} more. How many now?", "answer": f"{n}+{n}\n#### {2 * n}"}
        )
        + "\n"
        for n in range(1, 25)
    ),
    encoding="utf-8",
)

# %% [2] FastModel by Hub id, 16-bit
from unsloth import FastModel  # noqa: E402
import torch  # noqa: E402, F401

max_seq_length = 512

model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/gemma-3-1b-it",
    max_seq_length=max_seq_length,
    load_in_4bit=False,
    load_in_8bit=False,
    full_finetuning=False,
)

# %% [3] LoRA through the finetune_* switches
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

# %% [4] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=str(GSM8K_FILE), split="train")
print(dataset)

# %% [5] a question
dataset[0]["question"]

# %% [6] its answer
dataset[0]["answer"]


# %% [7] the number after ####
def extract_hash_answer(text):
    if "####" not in text:
        return None
    return text.split("####")[1].strip()


extract_hash_answer(dataset[0]["answer"])

# %% [8] the reasoning markers and the system prompt
reasoning_start = "<start_working_out>"
reasoning_end = "<end_working_out>"
solution_start = "<SOLUTION>"
solution_end = "</SOLUTION>"

system_prompt = f"""You are given a problem.
Think about the problem and provide your working out.
Place it between {reasoning_start} and {reasoning_end}.
Then, provide your solution between {solution_start}{solution_end}"""
print(system_prompt)

# %% [9] conversational prompts
dataset = dataset.map(
    lambda x: {
        "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": x["question"]}],
        "answer": extract_hash_answer(x["answer"]),
    }
)
dataset[0]

# %% [10] the format regex
import re  # noqa: E402

match_format = re.compile(
    rf"^[\s]{{0,}}{reasoning_start}.+?{reasoning_end}.*?{solution_start}(.+?){solution_end}[\s]{{0,}}$",
    flags=re.MULTILINE | re.DOTALL,
)

# %% [11] it matches
match_format.search("<start_working_out>Let me think!<end_working_out><SOLUTION>2</SOLUTION>")


# %% [12] reward: the exact format
def match_format_exactly(completions, **kwargs):
    return [3.0 if match_format.search(completion[0]["content"]) is not None else 0 for completion in completions]


# %% [13] reward: each marker once
def match_format_approximately(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        score = 0
        for marker in (reasoning_start, reasoning_end, solution_start, solution_end):
            score += 0.5 if response.count(marker) == 1 else -0.5
        scores.append(score)
    return scores


# %% [14] reward: the answer, exact or close
def check_answer(prompts, completions, answer, **kwargs):
    responses = [completion[0]["content"] for completion in completions]
    extracted = [guess.group(1) if (guess := match_format.search(r)) is not None else None for r in responses]
    scores = []
    for guess, true_answer in zip(extracted, answer):
        if guess is None:
            scores.append(0)
            continue
        if guess == true_answer:
            scores.append(3.0)
        elif guess.strip() == true_answer.strip():
            scores.append(1.5)
        else:
            try:
                ratio = float(guess) / float(true_answer)
                scores.append(0.5 if 0.9 <= ratio <= 1.1 else 0.25 if 0.8 <= ratio <= 1.2 else -1.0)
            except (ValueError, ZeroDivisionError):
                scores.append(-0.5)
    return scores


# %% [15] the number regex
match_numbers = re.compile(rf"{solution_start}.*?([\d\.]{{1,}})", flags=re.MULTILINE | re.DOTALL)
match_numbers.findall("<SOLUTION>  0.34  </SOLUTION>")


# %% [16] reward: the number, printing the first completion
def check_numbers(prompts, completions, answer, **kwargs):
    question = prompts[0][-1]["content"]
    responses = [completion[0]["content"] for completion in completions]
    extracted = [guess.group(1) if (guess := match_numbers.search(r)) is not None else None for r in responses]
    print("*" * 20, f"Question:\n{question}", f"\nAnswer:\n{answer[0]}", f"\nResponse:\n{responses[0]}")
    scores = []
    for guess, true_answer in zip(extracted, answer):
        if guess is None:
            scores.append(0)
            continue
        try:
            scores.append(1.5 if float(guess.strip()) == float(true_answer.strip()) else 0.0)
        except ValueError:
            scores.append(0)
    return scores


# %% [17] the GRPO config
max_prompt_length = 256

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

training_args = GRPOConfig(
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    optim="adamw_torch_fused",
    logging_steps=1,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=1,
    num_generations=4,
    max_prompt_length=max_prompt_length,
    max_completion_length=max_seq_length - max_prompt_length,
    max_steps=STEPS,
    save_steps=STEPS,
    max_grad_norm=0.1,
    report_to="none",
    output_dir="outputs",
)

# %% [18] GRPO with the four rewards
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[match_format_exactly, match_format_approximately, check_answer, check_numbers],
    args=training_args,
    train_dataset=dataset,
)
trainer.train()

# %% [19] stream an answer
messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "What is the sqrt of 101?"}]
text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=64,
    temperature=1.0,
    top_p=0.95,
    top_k=64,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [20] save the adapters and the tokenizer
model.save_pretrained("gemma_3_lora")
tokenizer.save_pretrained("gemma_3_lora")

# %% [21] merged save, off as published
if False:
    model.save_pretrained_merged("gemma-3-finetune", tokenizer)

# %% [22] merged push, off as published
if False:
    model.push_to_hub_merged("HF_ACCOUNT/gemma-3-finetune", tokenizer, token="YOUR_HF_TOKEN")

# %% [23] GGUF save, off as published
if False:
    model.save_pretrained_gguf("gemma_3_finetune", tokenizer, quantization_method="Q8_0")

# %% [24] GGUF push, off as published
if False:
    model.push_to_hub_gguf("HF_ACCOUNT/gemma_3_finetune", tokenizer, quantization_method="Q8_0", token="YOUR_HF_TOKEN")
