"""The Qwen2.5-VL (7B) GRPO notebook's calls, in its order, on a tiny Qwen 2.5 VL (mlx-vlm's `qwen2_5_vl`) under
its Hub id: `FastVisionModel` with `fast_inference`, LoRA on the language layers, MathVista prompts with an image
each, the notebook's two reward functions, `fast_generate` with `multi_modal_data`, GRPO with GSPO's sequence-level
importance sampling, `save_lora`, and `fast_generate` with `load_lora`.

Cell titles give the notebook's code-cell number. MathVista's testmini comes from a local Parquet file in its
columns (counting questions about red squares). Scaled to the tiny model: images resized to its own side instead of
512, completions of 32 tokens instead of 1024, two steps instead of half an epoch.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl"})
from tools.kits.tiny_vlm_model import IMAGE_SIDES  # noqa: E402

SIDE = IMAGE_SIDES["qwen2_5_vl"]
COMPLETION_TOKENS = 32

# %% [2] FastVisionModel by Hub id, 4-bit, with fast_inference
from unsloth import FastVisionModel  # noqa: E402

max_seq_length = 16384
lora_rank = 16

model, tokenizer = FastVisionModel.from_pretrained(
    model_name="unsloth/Qwen2.5-VL-7B-Instruct",
    max_seq_length=max_seq_length,
    load_in_4bit=True,
    fast_inference=True,
    gpu_memory_utilization=0.8,
)

# %% [2] the notebook's `import torch` (its own cell here: the safetensors check needs torch, the rest does not)
import torch  # noqa: E402, F401

# %% [3] LoRA on the language layers only
model = FastVisionModel.get_peft_model(
    model,
    finetune_vision_layers=False,
    finetune_language_layers=True,
    finetune_attention_modules=True,
    finetune_mlp_modules=True,
    r=16,
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
    use_gradient_checkpointing="unsloth",
)

# %% [4] the dataset, and TRL's GRPO names
from datasets import load_dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["AI4Math/MathVista:testmini"], split="train")


# %% [5] numeric answers only
def is_numeric_answer(example):
    try:
        float(example["answer"])
        return True
    except ValueError:
        return False


dataset = dataset.filter(is_numeric_answer)


# %% [6] resize, then RGB
def resize_images(example):
    example["decoded_image"] = example["decoded_image"].resize((SIDE, SIDE))
    return example


dataset = dataset.map(resize_images)


def convert_to_rgb(example):
    image = example["decoded_image"]
    if image.mode != "RGB":
        image = image.convert("RGB")
    example["decoded_image"] = image
    return example


dataset = dataset.map(convert_to_rgb)

# %% [7] prompts with an image placeholder; decoded_image becomes the image column
REASONING_START = "<REASONING>"
REASONING_END = "</REASONING>"
SOLUTION_START = "<SOLUTION>"
SOLUTION_END = "</SOLUTION>"


def make_conversation(example):
    text_content = (
        f"{example['question']}. Also first provide your reasoning or working out"
        f" on how you would go about solving the question between {REASONING_START} and {REASONING_END}"
        f" and then your final answer between {SOLUTION_START} and (put a single float here) {SOLUTION_END}"
    )
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text_content}]}]
    return {"prompt": prompt, "image": example["decoded_image"], "answer": example["answer"]}


train_dataset = dataset.map(make_conversation)
train_dataset = train_dataset.remove_columns("image")
train_dataset = train_dataset.rename_column("decoded_image", "image")

# %% [8] the chat template applied for TRL before 0.24 (unsloth_zoo's Version)
from unsloth_zoo.utils import Version  # noqa: E402

if Version("trl") < Version("0.24.0"):
    train_dataset = train_dataset.map(
        lambda example: {
            "prompt": tokenizer.apply_chat_template(example["prompt"], tokenize=False, add_generation_prompt=True)
        }
    )

# %% [9] the reward functions
import re  # noqa: E402


def formatting_reward_func(completions, **kwargs):
    thinking_pattern = f"{REASONING_START}(.*?){REASONING_END}"
    answer_pattern = f"{SOLUTION_START}(.*?){SOLUTION_END}"
    scores = []
    for completion in completions:
        score = 0.0
        if len(re.findall(thinking_pattern, completion, re.DOTALL)) == 1:
            score += 1.0
        if len(re.findall(answer_pattern, completion, re.DOTALL)) == 1:
            score += 1.0
        if len(completion) != 0:
            removal = completion.replace("addCriterion", "").replace("\n", "")
            if (len(completion) - len(removal)) / len(completion) >= 0.5:
                score -= 2.0
        scores.append(score)
    return scores


def correctness_reward_func(prompts, completions, answer, **kwargs) -> list[float]:
    answer_pattern = f"{SOLUTION_START}(.*?){SOLUTION_END}"
    responses = [re.findall(answer_pattern, completion, re.DOTALL) for completion in completions]
    print("-" * 20, f"Question:\n{prompts[0]}", f"\nAnswer:\n{answer[0]}", f"\nResponse:{completions[0]}")
    return [2.0 if len(r) == 1 and a == r[0].replace("\n", "") else 0.0 for r, a in zip(responses, answer)]


# %% [10] one prompt
print(train_dataset[0]["prompt"])

# %% [11] fast_generate on a prompt and its image, before training
from vllm import SamplingParams  # noqa: E402

sampling_params = SamplingParams(temperature=1.0, top_k=50, max_tokens=COMPLETION_TOKENS)
prompt = train_dataset[100]["prompt"]
if isinstance(prompt, list):
    prompt = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
outputs = model.fast_generate(
    {"prompt": prompt, "multi_modal_data": {"image": train_dataset[100]["image"]}},
    sampling_params,
)
print(outputs[0].outputs[0].text)

# %% [12] GRPOConfig with GSPO's sequence-level importance sampling
training_args = GRPOConfig(
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    optim="adamw_8bit",
    logging_steps=1,
    log_completions=False,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=2,
    num_generations=4,
    max_prompt_length=1024,
    max_completion_length=COMPLETION_TOKENS,
    max_steps=2,
    save_steps=60,
    max_grad_norm=0.1,
    report_to="none",
    output_dir="outputs",
    importance_sampling_level="sequence",
    mask_truncated_completions=False,
    loss_type="dr_grpo",
)

# %% [13] GRPOTrainer with the processor, then train
trainer = GRPOTrainer(
    model=model,
    args=training_args,
    processing_class=tokenizer,
    reward_funcs=[formatting_reward_func, correctness_reward_func],
    train_dataset=train_dataset,
)
trainer.train()

# %% [14] save_lora
model.save_lora("grpo_lora")

# %% [15] fast_generate with the saved adapter
prompt = train_dataset[165]["prompt"]
if isinstance(prompt, list):
    prompt = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
outputs = model.fast_generate(
    {"prompt": prompt, "multi_modal_data": {"image": train_dataset[165]["image"]}},
    sampling_params,
    lora_request=model.load_lora("grpo_lora"),
)
print(outputs[0].outputs[0].text)

# %% [16] the adapter's A and B are not all zeros, read with safetensors in torch
from safetensors import safe_open  # noqa: E402

tensors = {}
with safe_open("grpo_lora/adapter_model.safetensors", framework="pt") as f:
    for key in f.keys():
        tensor = f.get_tensor(key)
        n_zeros = (tensor == 0).sum() / tensor.numel()
        assert n_zeros.item() != tensor.numel()

# %% [17] merged saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("qwen_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [18] GGUF saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_gguf("qwen_finetune", tokenizer)
