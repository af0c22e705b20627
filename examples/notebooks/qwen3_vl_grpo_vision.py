"""The Qwen3-VL (8B) Vision GRPO notebook's calls, in its order, on a tiny Qwen 3 VL (mlx-vlm's `qwen3_vl`) under
its Hub id: `FastVisionModel` in 4 bits without vLLM, LoRA on the language layers, MathVista prompts with an image
each, the notebook's two reward functions, generation from the processor called on the image and the unrendered
conversation, GRPO with GSPO's sequence-level importance sampling, then the adapter saved and read back in torch.

Cell titles give the notebook's code-cell number. MathVista's testmini comes from a local Parquet file in its
columns (counting questions about red squares). Scaled to the tiny model: images resized to its own side instead of
512, completions of 32 tokens instead of 1024, two steps instead of half an epoch, 16 new tokens when generating.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/Qwen3-VL-8B-Instruct-unsloth-bnb-4bit": "qwen3_vl"})
from tools.kits.tiny_vlm_model import IMAGE_SIDES  # noqa: E402

SIDE = IMAGE_SIDES["qwen3_vl"]
COMPLETION_TOKENS = 32
NEW_TOKENS = 16

# %% [1] FastVisionModel by Hub id, 4-bit, vLLM off
from unsloth import FastVisionModel  # noqa: E402

max_seq_length = 16384
lora_rank = 16

model, tokenizer = FastVisionModel.from_pretrained(
    model_name="unsloth/Qwen3-VL-8B-Instruct-unsloth-bnb-4bit",
    max_seq_length=max_seq_length,
    load_in_4bit=True,
    fast_inference=False,
    gpu_memory_utilization=0.8,
)

# %% [1] the notebook's `import torch` (its own cell here: the safetensors check needs torch, the rest does not)
import torch  # noqa: E402, F401

# %% [2] LoRA on the language layers only
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

# %% [3] the dataset, and TRL's GRPO names
from datasets import load_dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["AI4Math/MathVista:testmini"], split="train")


# %% [4] numeric answers only
def is_numeric_answer(example):
    try:
        float(example["answer"])
        return True
    except ValueError:
        return False


dataset = dataset.filter(is_numeric_answer)


# %% [5] resize, then RGB
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

# %% [6] prompts with an image placeholder; decoded_image becomes the image column
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

# %% [7] the reward functions, which also take a completion given as messages
import re  # noqa: E402


def formatting_reward_func(completions, **kwargs):
    thinking_pattern = f"{REASONING_START}(.*?){REASONING_END}"
    answer_pattern = f"{SOLUTION_START}(.*?){SOLUTION_END}"
    scores = []
    for completion in completions:
        if isinstance(completion, list):
            completion = completion[0]["content"] if completion else ""
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
    completions = [(c[0]["content"] if c else "") if isinstance(c, list) else c for c in completions]
    responses = [re.findall(answer_pattern, completion, re.DOTALL) for completion in completions]
    print("-" * 20, f"Question:\n{prompts[0]}", f"\nAnswer:\n{answer[0]}", f"\nResponse:{completions[0]}")
    return [2.0 if len(r) == 1 and a == r[0].replace("\n", "") else 0.0 for r, a in zip(responses, answer)]


# %% [8] one prompt
train_dataset[0]["prompt"]

# %% [9] another
train_dataset[100]["prompt"]

# %% [10] the processor called on the image and the conversation as it stands, moved to "cuda", streamed
image = train_dataset[100]["image"]
prompt = train_dataset[100]["prompt"]

inputs = tokenizer(image, prompt, add_special_tokens=False, return_tensors="pt").to("cuda")

from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(
    **inputs, streamer=text_streamer, max_new_tokens=NEW_TOKENS, use_cache=True, temperature=1.0, min_p=0.1
)

# %% [11] GRPOConfig with GSPO's sequence-level importance sampling
from trl import GRPOConfig, GRPOTrainer  # noqa: E402, F811

training_args = GRPOConfig(
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.1,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    optim="adamw_8bit",
    logging_steps=1,
    log_completions=False,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=1,
    num_generations=2,
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

# %% [12] GRPOTrainer with the processor, then train
trainer = GRPOTrainer(
    model=model,
    args=training_args,
    processing_class=tokenizer,
    reward_funcs=[formatting_reward_func, correctness_reward_func],
    train_dataset=train_dataset,
)
trainer.train()

# %% [13] generation after training, as in cell 10
image = train_dataset[165]["image"]
prompt = train_dataset[165]["prompt"]

inputs = tokenizer(image, prompt, add_special_tokens=False, return_tensors="pt").to("cuda")

text_streamer = TextStreamer(tokenizer, skip_prompt=True)
_ = model.generate(
    **inputs, streamer=text_streamer, max_new_tokens=NEW_TOKENS, use_cache=True, temperature=1.0, min_p=0.1
)

# %% [14] the adapter and processor saved
model.save_pretrained("grpo_lora")
tokenizer.save_pretrained("grpo_lora")

# %% [15] the adapter's A and B are not all zeros, read with safetensors in torch
from safetensors import safe_open  # noqa: E402

tensors = {}
with safe_open("grpo_lora/adapter_model.safetensors", framework="pt") as f:
    for key in f.keys():
        tensor = f.get_tensor(key)
        n_zeros = (tensor == 0).sum() / tensor.numel()
        assert n_zeros.item() != tensor.numel()

# %% [16] merged saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("model", tokenizer, save_method="merged_16bit")
if False:
    model.push_to_hub_merged("hf/model", tokenizer, save_method="merged_16bit", token="")
if False:
    model.save_pretrained_merged("model", tokenizer, save_method="merged_4bit")
if False:
    model.push_to_hub_merged("hf/model", tokenizer, save_method="merged_4bit", token="")
if False:
    model.save_pretrained("model")
    tokenizer.save_pretrained("model")
if False:
    model.push_to_hub("hf/model", token="")
    tokenizer.push_to_hub("hf/model", token="")

# %% [17] GGUF saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_gguf("model", tokenizer)
if False:
    model.push_to_hub_gguf("hf/model", tokenizer, token="")
if False:
    model.save_pretrained_gguf("model", tokenizer, quantization_method="f16")
if False:
    model.push_to_hub_gguf("hf/model", tokenizer, quantization_method="f16", token="")
if False:
    model.save_pretrained_gguf("model", tokenizer, quantization_method="q4_k_m")
if False:
    model.push_to_hub_gguf("hf/model", tokenizer, quantization_method="q4_k_m", token="")
if False:
    model.push_to_hub_gguf("hf/model", tokenizer, quantization_method=["q4_k_m", "q8_0", "q5_k_m"], token="")
