"""The Llama 3.1 (8B) GRPO notebook's calls, in its order, on a tiny llama (mlx-lm's `llama`, Llama 3.1's rope
scaling, Llama 3.1's chat template) under its Hub id: the vLLM-style 4-bit load, GSM8K prompts in the XML
reasoning format, GRPO with the notebook's five reward functions, then `fast_generate` without the adapter,
`save_lora` and `fast_generate` with `load_lora`.

Cell titles give the notebook's code-cell number. GSM8K comes from a local file in its columns; the context is 512
tokens instead of 1024 (prompts 128 instead of 256), training two steps and each `fast_generate`
64 tokens instead of 1024.
"""

# %% [0-1] setup in place of the install cells
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/meta-Llama-3.1-8B-Instruct": ("llama", "llama-3.1")})
STEPS = 2
GSM8K_FILE = Path("gsm8k-main-train.jsonl")
GSM8K_FILE.write_text(
    "".join(
        json.dumps({"question": f"A box holds {n} pens; two boxes hold how many?", "answer": f"{n}*2\n#### {2 * n}"})
        + "\n"
        for n in range(1, 17)
    ),
    encoding="utf-8",
)

# %% [2] load with vLLM's keywords in 4 bits, then LoRA on every projection
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402, F401

max_seq_length = 512
lora_rank = 32

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/meta-Llama-3.1-8B-Instruct",
    max_seq_length=max_seq_length,
    load_in_4bit=True,
    fast_inference=True,
    max_lora_rank=lora_rank,
    gpu_memory_utilization=0.9,
)

model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=lora_rank,
    use_gradient_checkpointing="unsloth",
    random_state=3407,
)

# %% [3] GSM8K as conversations with the XML system prompt, and the five reward functions
import re  # noqa: E402
from datasets import load_dataset, Dataset  # noqa: E402

SYSTEM_PROMPT = """
Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>
"""


def extract_xml_answer(text: str) -> str:
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def extract_hash_answer(text: str):
    return text.split("####")[1].strip() if "####" in text else None


def get_gsm8k_questions(split="train") -> Dataset:
    # The notebook's load_dataset("openai/gsm8k", "main"), from the local file in GSM8K's columns.
    data = load_dataset("json", data_files={"train": str(GSM8K_FILE)})[split]
    return data.map(
        lambda x: {
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": x["question"]}],
            "answer": extract_hash_answer(x["answer"]),
        }
    )


dataset = get_gsm8k_questions()


def correctness_reward_func(prompts, completions, answer, **kwargs):
    responses = [completion[0]["content"] for completion in completions]
    extracted = [extract_xml_answer(r) for r in responses]
    print("-" * 20, f"Question:\n{prompts[0][-1]['content']}", f"\nAnswer:\n{answer[0]}")
    print(f"Response:\n{responses[0]}", f"\nExtracted:\n{extracted[0]}")
    return [2.0 if guess == truth else 0.0 for guess, truth in zip(extracted, answer)]


def int_reward_func(completions, **kwargs):
    return [0.5 if extract_xml_answer(c[0]["content"]).isdigit() else 0.0 for c in completions]


def strict_format_reward_func(completions, **kwargs):
    pattern = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
    return [0.5 if re.match(pattern, c[0]["content"]) else 0.0 for c in completions]


def soft_format_reward_func(completions, **kwargs):
    pattern = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
    return [0.5 if re.match(pattern, c[0]["content"]) else 0.0 for c in completions]


def count_xml(text) -> float:
    score = 0.0
    if text.count("<reasoning>\n") == 1:
        score += 0.125
    if text.count("\n</reasoning>\n") == 1:
        score += 0.125
    if text.count("\n<answer>\n") == 1:
        score += 0.125 - 0.001 * len(text.split("\n</answer>\n")[-1])
    if text.count("\n</answer>") == 1:
        score += 0.125 - 0.001 * (len(text.split("\n</answer>")[-1]) - 1)
    return score


def xmlcount_reward_func(completions, **kwargs):
    return [count_xml(c[0]["content"]) for c in completions]


# %% [4] the GRPO config, with trl 0.22's keywords and the paged 8-bit optimizer
max_prompt_length = 128

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

training_args = GRPOConfig(
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    optim="paged_adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=1,
    num_generations=6,
    max_prompt_length=max_prompt_length,
    max_completion_length=max_seq_length - max_prompt_length,
    max_steps=STEPS,
    save_steps=250,
    max_grad_norm=0.1,
    report_to="none",
    output_dir="outputs",
)

# %% [5] GRPO with the five rewards
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[
        xmlcount_reward_func,
        soft_format_reward_func,
        strict_format_reward_func,
        int_reward_func,
        correctness_reward_func,
    ],
    args=training_args,
    train_dataset=dataset,
)
trainer.train()

# %% [6] the base model, adapter off
text = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Calculate pi."}], tokenize=False, add_generation_prompt=True
)

from vllm import SamplingParams  # noqa: E402

sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=64)
output = model.fast_generate([text], sampling_params=sampling_params, lora_request=None)[0].outputs[0].text
output  # noqa: B018  (a notebook cell shows its last value)

# %% [7] save the GRPO adapter
model.save_lora("grpo_saved_lora")

# %% [8] the trained adapter, with the system prompt
text = tokenizer.apply_chat_template(
    [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Calculate pi."}],
    tokenize=False,
    add_generation_prompt=True,
)

from vllm import SamplingParams  # noqa: E402

sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=64)
output = (
    model.fast_generate(text, sampling_params=sampling_params, lora_request=model.load_lora("grpo_saved_lora"))[0]
    .outputs[0]
    .text
)
output  # noqa: B018  (a notebook cell shows its last value)

# %% [9] merged saves, off as published
if False:
    model.save_pretrained_merged("llama_finetune_16bit", tokenizer, save_method="merged_16bit")
if False:
    model.save_pretrained_merged("llama_finetune_4bit", tokenizer, save_method="merged_4bit")
if False:
    model.save_pretrained("llama_lora")
    tokenizer.save_pretrained("llama_lora")

# %% [10] GGUF saves, off as published
if False:
    model.save_pretrained_gguf("llama_finetune", tokenizer)
if False:
    model.save_pretrained_gguf("llama_finetune", tokenizer, quantization_method="f16")
if False:
    model.save_pretrained_gguf("llama_finetune", tokenizer, quantization_method="q4_k_m")
