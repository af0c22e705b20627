"""The GLM Flash (GLM-4.7-Flash, A100) notebook's calls, in its order, on a tiny GLM-4.7-Flash (mlx-lm's
`glm4_moe_lite`: multi-head latent attention, experts beside a shared expert) under its Hub id, with a template in
GLM's role-tag turns.

Cell titles give the notebook's code-cell number. The dataset comes from a local file in OpenMathReasoning's columns;
training is cut to a few steps; `train_on_responses_only` is called without markers, as the notebook does.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/GLM-4.7-Flash": ("glm4_moe_lite", "glm")})
STEPS = 3

# %% [1] FastLanguageModel in 16 bits, remote code trusted, compile off
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/GLM-4.7-Flash",
    max_seq_length=2048,
    load_in_4bit=False,
    load_in_8bit=False,
    full_finetuning=False,
    trust_remote_code=True,
    unsloth_force_compile=False,
)

# %% [2] LoRA on the notebook's names, out_proj included
model = FastLanguageModel.get_peft_model(
    model,
    r=8,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "out_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% [3] the maths dataset's cot split
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["unsloth/OpenMathReasoning-mini"], split="train")


# %% [4] each problem and its worked solution as a conversation
def generate_conversation(examples):
    conversations = []
    for problem, solution in zip(examples["problem"], examples["generated_solution"]):
        conversations.append([{"role": "user", "content": problem}, {"role": "assistant", "content": solution}])
    return {"conversations": conversations}


dataset = dataset.map(generate_conversation, batched=True)


# %% [5] the model's own template
def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False) for convo in convos]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [6] one rendered row
print(dataset[100]["text"])

# %% [7] SFTTrainer, one process for the dataset
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
        dataset_num_proc=1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
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

# %% [8] train on the answers only, markers found from the template
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [9] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [10] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [11] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [12] train
trainer_stats = trainer.train()

# %% [13] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")

# %% [14] generate with the notebook's sampling settings
messages = [{"role": "user", "content": "Continue the sequence: 1, 1, 2, 3, 5, 8,"}]
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    max_new_tokens=16,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
    use_cache=True,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [15] save the adapters and the tokenizer
model.save_pretrained("glm_flash_lora")
tokenizer.save_pretrained("glm_flash_lora")

# %% [16] reload the adapters in 4 bits (the notebook's `if False:` turned on)
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="glm_flash_lora", max_seq_length=2048, load_in_4bit=True
)

# %% [17] merged 16-bit save (turned on); the 4-bit merge, LoRA save and the pushes stay off as published
model.save_pretrained_merged("glm_flash_finetune_16bit", tokenizer, save_method="merged_16bit")

# %% [18] GGUF q8_0 (turned on); the other types and the pushes stay off as published
model.save_pretrained_gguf("glm_flash_finetune", tokenizer)
