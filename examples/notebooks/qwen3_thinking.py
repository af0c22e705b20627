"""The Qwen3 (4B) Thinking notebook's calls, in its order, on a tiny Qwen 3 (mlx-lm's `qwen3`: per-head query and
key norms) under its Hub id, loaded in 4 bits as the notebook asks, with the `qwen3-thinking` chat template and
the notebook's own ChatML markers for the responses-only masking.

Cell titles give the notebook's code-cell number. The dataset comes from a local file in OpenMathReasoning's columns;
training is cut to a few steps; the saves the notebook leaves off are turned on (merged 16-bit, GGUF q8_0).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/Qwen3-4B-Thinking-2507": ("qwen3", "qwen3-thinking")})
STEPS = 3

# %% [1] FastLanguageModel in 4 bits
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/Qwen3-4B-Thinking-2507",
    max_seq_length=2048,
    load_in_4bit=True,
    load_in_8bit=False,
    full_finetuning=False,
)

# %% [2] LoRA on attention and MLP
model = FastLanguageModel.get_peft_model(
    model,
    r=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the qwen3-thinking template
from unsloth.chat_templates import get_chat_template  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="qwen3-thinking")

# %% [4] the maths dataset's cot split
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")


# %% [5] each problem and its worked solution as a conversation
def generate_conversation(examples):
    problems = examples["problem"]
    solutions = examples["generated_solution"]
    conversations = []
    for problem, solution in zip(problems, solutions):
        conversations.append([{"role": "user", "content": problem}, {"role": "assistant", "content": solution}])
    return {"conversations": conversations}


dataset = dataset.map(generate_conversation, batched=True)


# %% [6] render each conversation
def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False) for convo in convos]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [7] one rendered row
print(dataset[100]["text"])

# %% [8] SFTTrainer
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
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

# %% [9] train on the answers only, with ChatML's markers named
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(
    trainer, instruction_part="<|im_start|>user\n", response_part="<|im_start|>assistant\n"
)

# %% [10] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [11] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [12] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [13] train
trainer_stats = trainer.train()

# %% [14] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [15] generate with thinking switched off and Qwen's non-thinking sampling settings
messages = [{"role": "user", "content": "Solve (x + 2)^2 = 0."}]
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=16,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
)

# %% [16] save the adapters and the tokenizer
model.save_pretrained("qwen_lora")
tokenizer.save_pretrained("qwen_lora")

# %% [17] reload the adapters in 4 bits (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(model_name="qwen_lora", max_seq_length=2048, load_in_4bit=True)

# %% [18] merged 16-bit save (turned on); the 4-bit merge and the pushes stay off as published
model.save_pretrained_merged("qwen_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [19] GGUF q8_0 (turned on); the other types and the pushes stay off as published
model.save_pretrained_gguf("qwen_finetune", tokenizer)
