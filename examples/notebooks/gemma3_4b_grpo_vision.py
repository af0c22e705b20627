"""The Gemma3 (4B) Vision GRPO notebook's calls, in its order, on a tiny Gemma 3 (mlx-vlm's `gemma3`) under its Hub
id: `FastVisionModel` in 4 bits, LoRA on the language layers, MathVista prompts with an image each, rendered by the
chat template for TRL before 0.24 (unsloth_zoo's `Version`), the notebook's two reward functions, GRPO with GSPO's
sequence-level importance sampling, generation through the processor, then the adapter saved.

Cell titles give the notebook's code-cell number. MathVista's testmini comes from a local Parquet file in its
columns (counting questions about red squares). Scaled to the tiny model: images resized to its own side instead of
512, completions of 32 tokens instead of 1024, two steps instead of 60, 16 new tokens when generating.
"""

# %% [0] setup in place of the two install cells
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/gemma-3-4b-it": "gemma3"})
from tools.kits.tiny_vlm_model import IMAGE_SIDES  # noqa: E402

SIDE = IMAGE_SIDES["gemma3"]
COMPLETION_TOKENS = 32
NEW_TOKENS = 16

# %% [2] FastVisionModel by Hub id, 4-bit
from unsloth import FastVisionModel  # noqa: E402

model, tokenizer = FastVisionModel.from_pretrained(
    "unsloth/gemma-3-4b-it",
    load_in_4bit=True,
    use_gradient_checkpointing="unsloth",
)

# %% [2] the notebook's `import torch` (its own cell here: nothing below needs it)
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

# %% [4] the cell's second `import torch`, on its own here
import torch  # noqa: E402, F401, F811

# %% [5] one image
dataset["decoded_image"][5]

# %% [6] its question and answer
dataset["question"][5], dataset["answer"][5]


# %% [7] numeric answers only
def is_numeric_answer(example):
    try:
        float(example["answer"])
        return True
    except ValueError:
        return False


dataset = dataset.filter(is_numeric_answer)


# %% [8] resize, then RGB
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

# %% [9] prompts with an image placeholder; decoded_image becomes the image column
REASONING_START = "<REASONING>"
REASONING_END = "</REASONING>"
SOLUTION_START = "<SOLUTION>"
SOLUTION_END = "</SOLUTION>"


def make_conversation(example):
    text_content = (
        f"{example['question']}, provide your reasoning between {REASONING_START} and {REASONING_END} "
        f"and then your final answer between {SOLUTION_START} and (put a float here) {SOLUTION_END}"
    )
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text_content}]}]
    return {"prompt": prompt, "image": example["decoded_image"], "answer": example["answer"]}


train_dataset = dataset.map(make_conversation)
train_dataset = train_dataset.remove_columns("image")
train_dataset = train_dataset.rename_column("decoded_image", "image")

# %% [10] the chat template applied for TRL before 0.24 (unsloth_zoo's Version), without a generation prompt
from unsloth_zoo.utils import Version  # noqa: E402

if Version("trl") < Version("0.24.0"):
    train_dataset = train_dataset.map(
        lambda example: {
            "prompt": tokenizer.apply_chat_template(example["prompt"], tokenize=False, add_generation_prompt=False)
        }
    )


# %% [11] the reward functions
def formatting_reward_func(completions, **kwargs):
    import re

    thinking_pattern = f"{REASONING_START}(.*?){REASONING_END}"
    answer_pattern = f"{SOLUTION_START}(.*?){SOLUTION_END}"
    scores = []
    for completion in completions:
        score = 0
        if len(re.findall(thinking_pattern, completion, re.DOTALL)) == 1:
            score += 1.0
        if len(re.findall(answer_pattern, completion, re.DOTALL)) == 1:
            score += 1.0
        scores.append(score)
    return scores


def correctness_reward_func(prompts, completions, answer, **kwargs) -> list[float]:
    import re

    answer_pattern = f"{SOLUTION_START}(.*?){SOLUTION_END}"
    responses = [re.findall(answer_pattern, completion, re.DOTALL) for completion in completions]
    print("-" * 20, f"Question:\n{prompts[0]}", f"\nAnswer:\n{answer[0]}", f"\nResponse:{completions[0]}")
    return [2.0 if len(r) == 1 and a == r[0].replace("\n", "") else 0.0 for r, a in zip(responses, answer)]


# %% [12] one prompt
train_dataset[0]["prompt"]

# %% [13] GRPOConfig with GSPO's sequence-level importance sampling
from trl import GRPOConfig, GRPOTrainer  # noqa: E402, F811

training_args = GRPOConfig(
    learning_rate=5e-6,
    adam_beta1=0.9,
    adam_beta2=0.99,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    optim="adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=2,
    num_generations=4,
    max_prompt_length=1024,
    max_completion_length=COMPLETION_TOKENS,
    importance_sampling_level="sequence",
    mask_truncated_completions=False,
    loss_type="dr_grpo",
    max_steps=2,
    save_steps=60,
    max_grad_norm=0.1,
    report_to="none",
    output_dir="outputs",
)

# %% [14] GRPOTrainer with the processor, then train
trainer = GRPOTrainer(
    model=model,
    args=training_args,
    processing_class=tokenizer,
    reward_funcs=[formatting_reward_func, correctness_reward_func],
    train_dataset=train_dataset,
)
trainer.train()

# %% [15] generation after training: the processor called with the image, moved to "cuda", streamed
FastVisionModel.for_inference(model)
image = dataset[100]["decoded_image"]
instruction = (
    f"{dataset[100]['question']}, provide your reasoning between {REASONING_START} and {REASONING_END} "
    f"and then your final answer between {SOLUTION_START} and (put a float here) {SOLUTION_END}"
)
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
inputs = tokenizer(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")
from transformers import TextStreamer  # noqa: E402

text_streamer = TextStreamer(tokenizer, skip_prompt=True)
result = model.generate(
    **inputs, streamer=text_streamer, max_new_tokens=NEW_TOKENS, use_cache=True, temperature=1.0, top_p=0.95, top_k=64
)

# %% [16] the adapter and processor saved
model.save_pretrained("gemma_3_lora")
tokenizer.save_pretrained("gemma_3_lora")

# %% [17] generation with the text before the image (the reload is behind `if False`, as in the notebook)
if False:
    model, processor = FastVisionModel.from_pretrained(model_name="gemma_3_lora", load_in_4bit=True)
    FastVisionModel.for_inference(model)
FastVisionModel.for_inference(model)
sample = dataset[1]
image = sample["decoded_image"].convert("RGB")
text = (
    f"{sample['question']}, provide your reasoning between {REASONING_START} and {REASONING_END} "
    f"and then your final answer between {SOLUTION_START} and (put a float here) {SOLUTION_END}"
)
messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
inputs = tokenizer(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")
text_streamer = TextStreamer(tokenizer, skip_prompt=True)
result = model.generate(
    **inputs, streamer=text_streamer, max_new_tokens=NEW_TOKENS, use_cache=True, temperature=1.0, top_p=0.95, top_k=64
)

# %% [18] merged saves (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)
if False:
    model.push_to_hub_merged("YOUR_USERNAME/unsloth_finetune", tokenizer, token="YOUR_HF_TOKEN")
