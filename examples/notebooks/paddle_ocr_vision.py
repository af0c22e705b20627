"""The PaddleOCR-VL (1B) Vision notebook's calls, in its order, on a tiny PaddleOCR-VL (mlx-vlm's `paddleocr_vl`: a
NaViT tower, an ERNIE 4.5 text model) under its Hub id: `FastVisionModel` with `full_finetuning=True` through
`auto_model=AutoModelForCausalLM` and remote code, the processor from transformers' `AutoProcessor`, LoRA on a list
of module names, OCR conversations, generation through that processor before and after `SFTTrainer` with an
`UnslothVisionDataCollator` that trains on responses only, then the adapter saved.

Cell titles give the notebook's code-cell number. LaTeX_OCR comes from a local Parquet file of coloured squares
in its columns (`image`, `text`); training runs a few steps. The IPython formula display is not run (no IPython).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_vision  # noqa: E402

DATA = prepare_vision({"unsloth/PaddleOCR-VL": "paddleocr_vl"}, rows=8)
STEPS = 3

# %% [1] FastVisionModel by Hub id: full fine-tuning, the checkpoint's remote code behind AutoModelForCausalLM
from unsloth import FastVisionModel  # noqa: E402
from transformers import AutoModelForCausalLM, AutoProcessor  # noqa: E402

fourbit_models = ["unsloth/Qwen3-VL-8B-Instruct-bnb-4bit", "unsloth/Qwen3-VL-8B-Thinking-bnb-4bit"]
model_path = "unsloth/PaddleOCR-VL"
model, tokenizer = FastVisionModel.from_pretrained(
    model_path,
    max_seq_length=2048,
    load_in_4bit=False,
    load_in_8bit=False,
    full_finetuning=True,
    auto_model=AutoModelForCausalLM,
    trust_remote_code=True,
    unsloth_force_compile=True,
)

# %% [1] the notebook's `import torch` (its own cell here: the memory cells need torch, the rest does not)
import torch  # noqa: E402, F401

# %% [2] the processor, loaded again through transformers
processor = AutoProcessor.from_pretrained(model_path, trust_remote_code=True)

# %% [3] get_peft_model on a list of module names (both towers' and the projector's)
model = FastVisionModel.get_peft_model(
    model,
    r=64,
    lora_alpha=64,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    target_modules=[
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "out_proj",
        "fc1",
        "fc2",
        "linear_1",
        "linear_2",
    ],
)

# %% [4] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("parquet", data_files=DATA["unsloth/LaTeX_OCR"], split="train")

# %% [5] the dataset's summary
print(dataset)

# %% [6] one image
print(dataset[2]["image"])

# %% [7] its text
print(dataset[2]["text"])

# %% [8] the formula shown through IPython (not run here: no IPython)

# %% [9] rows as conversations, the image also in an `images` column
instruction = "OCR:"


def convert_to_conversation(sample):
    conversation = [
        {
            "role": "user",
            "content": [{"type": "text", "text": instruction}, {"type": "image", "image": sample["image"]}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": sample["text"]}]},
    ]
    return {"images": [sample["image"]], "messages": conversation}


# %% [10] the converted dataset
converted_dataset = [convert_to_conversation(sample) for sample in dataset]

# %% [11] one converted row
print(converted_dataset[0])


# %% [12] generation before training: the template rendered by the processor's tokenizer, the processor called
def ask_about(image):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": instruction}]}]
    text_prompt = processor.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return processor(image, text_prompt, add_special_tokens=False, return_tensors="pt").to("cuda")


def stream_answer(inputs):
    from transformers import TextStreamer

    text_streamer = TextStreamer(tokenizer, skip_prompt=True)
    _ = model.generate(**inputs, streamer=text_streamer, max_new_tokens=16, use_cache=False, temperature=1.5, min_p=0.1)


FastVisionModel.for_inference(model)
inputs = ask_about(dataset[2]["image"])
stream_answer(inputs)

# %% [13] SFTTrainer with a collator built on the processor, trained on the answers only
from trl import SFTTrainer, SFTConfig  # noqa: E402
from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402

FastVisionModel.for_training(model)

custom_collator = UnslothVisionDataCollator(
    model=model,
    processor=processor,
    ignore_index=-100,
    max_seq_length=2048,
    train_on_responses_only=True,
    instruction_part="User:",
    response_part="\nAssistant:",
    pad_to_multiple_of=8,
)

trainer = SFTTrainer(
    model=model,
    tokenizer=processor.tokenizer,
    data_collator=custom_collator,
    train_dataset=converted_dataset,
    args=SFTConfig(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        warmup_steps=1,
        max_steps=STEPS,
        learning_rate=5e-5,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=2048,
        fp16=not torch.cuda.is_bf16_supported(),
        bf16=torch.cuda.is_bf16_supported(),
    ),
)

# %% [14] memory stats before training
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")
print(f"{start_gpu_memory} GB of memory reserved.")

# %% [15] train
trainer_stats = trainer.train()

# %% [16] memory and time stats after training
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
used_memory_for_lora = round(used_memory - start_gpu_memory, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"{round(trainer_stats.metrics['train_runtime'] / 60, 2)} minutes used for training.")
print(f"Peak reserved memory = {used_memory} GB.")
print(f"Peak reserved memory for training % of max memory = {round(used_memory_for_lora / max_memory * 100, 3)} %.")

# %% [17] generation after training
FastVisionModel.for_inference(model)
inputs = ask_about(dataset[2]["image"])
stream_answer(inputs)

# %% [18] the adapter saved
model.save_pretrained("paddle_ocr_lora")
tokenizer.save_pretrained("paddle_ocr_lora")

# %% [19] generation again on the same inputs (the reload is behind `if False`, as in the notebook)
if False:
    model, tokenizer = FastVisionModel.from_pretrained(model_name="paddle_ocr_lora", load_in_4bit=False)
    FastVisionModel.for_inference(model)
stream_answer(inputs)

# %% [20] merged 16-bit save (behind `if False`, as in the notebook)
if False:
    model.save_pretrained_merged("unsloth_finetune", tokenizer)
