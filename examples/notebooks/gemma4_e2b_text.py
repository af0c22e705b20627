"""The Gemma 4 (E2B) Text notebook's calls, in its order, on a tiny Gemma 4 text model (mlx-lm's `gemma4_text`:
per-layer input embeddings, sliding and global attention) under its Hub id, loaded for text, with a template in the
manner of Gemma 4's own (a placeholder per image or audio part).

Cell titles give the notebook's code-cell number. The notebook sends an image, an audio clip and both to the model
before training; on a text load each of those three cells is refused naming the part (the model cannot see or hear
them), and the test expects exactly those three. The audio download and player cells are not run (no network).
"""

# %% [0] setup in place of the two install cells
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/gemma-4-E2B-it": ("gemma4_text", "gemma4_own")})
STEPS = 3

# %% [1] FastModel, 16-bit, LoRA later
from unsloth import FastModel  # noqa: E402
import torch  # noqa: E402

gemma4_models = ["unsloth/gemma-4-E2B-it", "unsloth/gemma-4-E4B-it", "unsloth/gemma-4-E2B", "unsloth/gemma-4-E4B"]
model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/gemma-4-E2B-it",
    dtype=None,
    max_seq_length=1024,
    load_in_4bit=False,
    full_finetuning=False,
)

# %% [2] the inference helper: tokenized dict from the template, moved to "cuda"
from transformers import TextStreamer  # noqa: E402


def do_gemma_4_inference(messages, max_new_tokens=128):
    _ = model.generate(
        **tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        ).to("cuda"),
        max_new_tokens=max_new_tokens,
        temperature=1.0,
        top_p=0.95,
        top_k=64,
        streamer=TextStreamer(tokenizer, skip_prompt=True),
    )


# %% [3] an image part sent to the text load: refused naming 'image'
sloth_link = "https://example.invalid/sloth.jpg"
messages = [
    {
        "role": "user",
        "content": [
            {"type": "image", "image": sloth_link},
            {"type": "text", "text": "Which films does this animal feature in?"},
        ],
    }
]
do_gemma_4_inference(messages, max_new_tokens=256)

# %% [4] a text-only list of parts
messages = [{"role": "user", "content": [{"type": "text", "text": "Write a poem about sloths."}]}]
do_gemma_4_inference(messages, max_new_tokens=16)

# %% [5] the audio player (IPython display of a download; not run here)

# %% [6] the audio download with wget (not run here: no network)

# %% [7] an audio part: refused naming 'audio'
audio_file = "audio.mp3"
messages = [
    {
        "role": "user",
        "content": [{"type": "audio", "audio": audio_file}, {"type": "text", "text": "What is this audio about?"}],
    }
]
do_gemma_4_inference(messages, max_new_tokens=256)

# %% [8] audio and image together: refused naming the first, 'audio'
messages = [
    {
        "role": "user",
        "content": [
            {"type": "audio", "audio": audio_file},
            {"type": "image", "image": sloth_link},
            {"type": "text", "text": "What is this audio and image about? How are they related?"},
        ],
    }
]
do_gemma_4_inference(messages, max_new_tokens=256)

# %% [9] LoRA from the finetune_* switches, vision layers off
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

# %% [10] the gemma-4 chat template
from unsloth.chat_templates import get_chat_template  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="gemma-4")

# %% [11] the first 3000 rows of the ShareGPT dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["mlabonne/FineTome-100k"], split="train[:3000]")

# %% [12] standardize_data_formats
from unsloth.chat_templates import standardize_data_formats  # noqa: E402

dataset = standardize_data_formats(dataset)

# %% [13] one row
print(dataset[100])


# %% [14] render each conversation, without the leading '<bos>'
def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [
        tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False).removeprefix("<bos>")
        for convo in convos
    ]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% [15] one rendered row
print(dataset[100]["text"])

# %% [16] SFTTrainer
from trl import SFTTrainer, SFTConfig  # noqa: E402

trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=dataset,
    eval_dataset=None,
    args=SFTConfig(
        dataset_text_field="text",
        per_device_train_batch_size=1,
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

# %% [17] train on the answers only, markers read from the gemma-4 template
from unsloth.chat_templates import train_on_responses_only  # noqa: E402

trainer = train_on_responses_only(trainer)

# %% [18] a row's tokens
print(tokenizer.decode(trainer.train_dataset[100]["input_ids"]))

# %% [19] its labels, masked positions shown as spaces
print(
    tokenizer.decode(
        [tokenizer.pad_token_id if x == -100 else x for x in trainer.train_dataset[100]["labels"]]
    ).replace(tokenizer.pad_token, " ")
)

# %% [20] memory before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [21] train
trainer_stats = trainer.train()

# %% [22] memory and time after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [23] the template again, then a batch decode of the generated ids
tokenizer = get_chat_template(tokenizer, chat_template="gemma-4")
messages = [{"role": "user", "content": [{"type": "text", "text": "Continue the sequence: 1, 1, 2, 3, 5, 8,"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
outputs = model.generate(**inputs, max_new_tokens=16, temperature=1.0, top_p=0.95, top_k=64)
print(tokenizer.batch_decode(outputs))

# %% [24] streamed answer
messages = [{"role": "user", "content": [{"type": "text", "text": "Why is the sky blue?"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
_ = model.generate(
    **inputs,
    max_new_tokens=16,
    temperature=1.0,
    top_p=0.95,
    top_k=64,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [25] save the adapters and the tokenizer
model.save_pretrained("gemma_4_lora")
tokenizer.save_pretrained("gemma_4_lora")

# %% [26] the reload stays off as published; one more answer
if False:
    model, tokenizer = FastModel.from_pretrained(model_name="gemma_4_lora", max_seq_length=2048, load_in_4bit=True)
messages = [{"role": "user", "content": [{"type": "text", "text": "What is Gemma-4?"}]}]
inputs = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", tokenize=True, return_dict=True
).to("cuda")
_ = model.generate(
    **inputs,
    max_new_tokens=16,
    temperature=1.0,
    top_p=0.95,
    top_k=64,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [27] merged save (turned on)
model.save_pretrained_merged("gemma-4-finetune", tokenizer)

# %% [28] GGUF in Q8_0 (turned on); the pushes stay off as published
model.save_pretrained_gguf("gemma_4_finetune", tokenizer, quantization_method="Q8_0")
