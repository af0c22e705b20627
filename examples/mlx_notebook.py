"""A CUDA-style Unsloth fine-tuning notebook, run unchanged on Apple silicon through the MLX backend.

Each `# %%` block is one notebook cell as a Colab notebook written for CUDA would have it: a Hub id loaded with
`load_in_4bit=True`, LoRA on top (QLoRA), the llama-3.1 chat template, a ShareGPT dataset standardised, TRL's
`SFTConfig` / `SFTTrainer` in TRL's argument order with gradient accumulation, `train_on_responses_only`,
`.to("cuda")`, `torch.cuda` and `unsloth.get_gpu_memory_stats()` memory calls, and a GGUF export:

    python examples/mlx_notebook.py --model-name unsloth/Llama-3.2-1B-Instruct   # through the Hugging Face cache
    python examples/mlx_notebook.py --model-dir path/to/llama-folder               # a local folder

Without either it builds the repository's tiny random-weight llama into a temporary Hugging Face cache and loads
it by Hub id offline (needs the repository checkout). `--peft-config` passes TRL's `peft_config=` as some
notebooks do; on MLX that stops at construction, by name. On Linux, `UNSLOTH_MLX=1` switches the MLX backend on
(mlx[cpu]); on Apple silicon it is on by default.
"""

# %% Settings (a notebook's first cell; here they come from the command line)
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model-name", help="a Hugging Face Hub id (read through the Hugging Face cache, HF_HOME)")
parser.add_argument(
    "--model-dir", help="a local Hugging Face-style llama folder (config.json, *.safetensors, tokenizer)"
)
parser.add_argument("--output-dir", default="outputs_mlx_notebook")
parser.add_argument("--peft-config", action="store_true", help="pass peft_config= to SFTTrainer (refused on MLX)")
options = parser.parse_args()

if options.model_name is None and options.model_dir is None:
    # The repository's own tiny llama, stored as a Hub cache entry so the Hub id path runs without a download.
    hf_home = Path(tempfile.mkdtemp()) / "hf-home"
    os.environ["HF_HOME"] = str(hf_home)
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    repository = hf_home / "hub" / "models--unsloth-tiny--tiny-llama"
    revision = "0" * 40
    build_tiny_mlx_model(repository / "snapshots" / revision)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    options.model_name = "unsloth-tiny/tiny-llama"
model_name = options.model_name or options.model_dir
output_dir = Path(options.output_dir)

# %% Load the model in 4 bits (unsloth first, as in every Unsloth notebook)
from unsloth import FastLanguageModel, get_gpu_memory_stats, is_bfloat16_supported  # noqa: E402

import torch  # noqa: E402

max_seq_length = 2048  # longer than the tiny model's 512 positions: clamped, with a message
dtype = None
load_in_4bit = True  # MLX quantizes the base to 4 bits (group size 64); LoRA trains on top of it

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name=model_name,
    max_seq_length=max_seq_length,
    dtype=dtype,
    load_in_4bit=load_in_4bit,
)

# %% Add LoRA adapters
model = FastLanguageModel.get_peft_model(
    model,
    r=16,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% Data: ShareGPT conversations, standardised, rendered with the llama-3.1 chat template
from datasets import Dataset  # noqa: E402

from unsloth.chat_templates import get_chat_template, standardize_sharegpt, train_on_responses_only  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="llama-3.1")
facts = [
    ("What colour is the kettle?", "The kettle is red."),
    ("Where do bees carry pollen?", "Bees carry pollen to the hive."),
    ("How many times does the river bend?", "The river bends twice."),
    ("Where does the bread cool?", "The bread cools by the door."),
    ("What does the lighthouse blink?", "The lighthouse blinks green."),
    ("What settles on the pines?", "Snow settles on the pines."),
    ("How many herons wait?", "Two herons wait in the reeds."),
    ("How slow is the library clock?", "The clock is four minutes slow."),
]
dataset = Dataset.from_list(
    [{"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]} for q, a in facts]
)
dataset = standardize_sharegpt(dataset)


def formatting_prompts_func(examples):
    convos = examples["conversations"]
    texts = [tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=False) for convo in convos]
    return {"text": texts}


dataset = dataset.map(formatting_prompts_func, batched=True)

# %% Train with TRL's SFTTrainer in TRL's order (model, args, data_collator, train_dataset, eval_dataset, tokenizer)
from transformers import DataCollatorForSeq2Seq, TrainerCallback  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402


class LossHistory(TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


history = LossHistory()
training_args = SFTConfig(
    dataset_text_field="text",
    max_length=max_seq_length,
    dataset_num_proc=1,
    packing=False,
    per_device_train_batch_size=2,
    gradient_accumulation_steps=4,
    warmup_steps=5,
    max_steps=30,
    learning_rate=3e-3,
    fp16=not is_bfloat16_supported(),
    bf16=is_bfloat16_supported(),
    logging_steps=1,
    optim="adamw_8bit",
    weight_decay=0.01,
    lr_scheduler_type="linear",
    seed=3407,
    output_dir=str(output_dir),
    report_to="none",
    save_strategy="no",
    dataloader_num_workers=0,
    max_grad_norm=1.0,
    adam_beta1=0.9,
    adam_beta2=0.999,
    push_to_hub=False,
    remove_unused_columns=True,
)
extra = {}
if options.peft_config:
    try:
        from peft import LoraConfig

        extra["peft_config"] = LoraConfig(r=16, lora_alpha=16, task_type="CAUSAL_LM")
    except ImportError:
        # peft needs CUDA-era torch extras; the same settings as a dict are refused just the same.
        extra["peft_config"] = {"r": 16, "lora_alpha": 16, "task_type": "CAUSAL_LM"}
trainer = SFTTrainer(
    model,
    training_args,
    DataCollatorForSeq2Seq(tokenizer=tokenizer),
    dataset,
    None,
    tokenizer,
    callbacks=[history],
    **extra,
)
trainer = train_on_responses_only(
    trainer,
    instruction_part="<|start_header_id|>user<|end_header_id|>\n\n",
    response_part="<|start_header_id|>assistant<|end_header_id|>\n\n",
)

# %% Memory before training, as CUDA notebooks print it
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
free_bytes, total_bytes = torch.cuda.mem_get_info()
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB. {start_gpu_memory} GB of memory reserved.")
print(get_gpu_memory_stats())

trainer_stats = trainer.train()
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training; peak reserved memory = {used_memory} GB.")

# %% Inference, as CUDA notebooks write it: model.generate with a streamer, then batch_decode
from transformers import TextStreamer  # noqa: E402

FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "What colour is the kettle?"}]
inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt").to(
    "cuda"
)
outputs = model.generate(
    input_ids=inputs, streamer=TextStreamer(tokenizer, skip_prompt=True), max_new_tokens=12, use_cache=True
)
prompt_length = (inputs["input_ids"] if hasattr(inputs, "keys") else inputs).shape[1]
answer = tokenizer.batch_decode(outputs[:, prompt_length:], skip_special_tokens=True)[0]

# %% Save the adapters and a GGUF of the merged model
model.save_pretrained(str(output_dir / "lora_model"))
tokenizer.save_pretrained(str(output_dir / "lora_model"))
gguf_path = model.save_pretrained_gguf(str(output_dir / "gguf_model"), tokenizer, quantization_method="f16")
memory_after = get_gpu_memory_stats()

print(
    json.dumps(
        {
            "global_step": trainer_stats.global_step,
            "first_loss": history.losses[0],
            "last_loss": history.losses[-1],
            "free_bytes": free_bytes,
            "total_bytes": total_bytes,
            "answer": answer,
            "gguf": str(gguf_path),
            "quantized_base": type(model.layers[0].self_attn.q_proj.linear).__name__,
            "trained_token_share": sum(int(m.sum()) for m in trainer.train_rows.masks)
            / sum(m.size for m in trainer.train_rows.masks),
            "memory_total_gb": memory_after["total_memory_gb"],
        }
    )
)
