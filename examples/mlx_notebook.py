"""A CUDA-style Unsloth fine-tuning notebook, run unchanged on Apple silicon through the MLX backend.

Each `# %%` block is one notebook cell as a Colab notebook written for CUDA would have it: TRL's imports,
`SFTConfig` with the usual two dozen keywords, `SFTTrainer` in TRL's argument order, `.to("cuda")` and
`torch.cuda` memory calls. Run it with a local model folder (nothing is downloaded):

    python examples/mlx_notebook.py --model-dir path/to/llama-folder

Without `--model-dir` it builds the repository's tiny random-weight llama (needs the repository checkout).
`--peft-config` passes TRL's `peft_config=` as some notebooks do; on MLX that stops at construction, by name.
On Linux, `UNSLOTH_MLX=1` switches the MLX backend on (mlx[cpu]); on Apple silicon it is on by default.
"""

# %% Settings (a notebook's first cell; here they come from the command line)
import argparse
import json
import sys
import tempfile
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument(
    "--model-dir", help="a local Hugging Face-style llama folder (config.json, *.safetensors, tokenizer)"
)
parser.add_argument("--output-dir", default="outputs_mlx_notebook")
parser.add_argument("--peft-config", action="store_true", help="pass peft_config= to SFTTrainer (refused on MLX)")
options = parser.parse_args()

if options.model_dir is None:
    # The repository's own tiny llama, so the notebook runs without any model download.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tools.tiny_mlx_model import build_tiny_mlx_model

    options.model_dir = str(build_tiny_mlx_model(Path(tempfile.mkdtemp()) / "tiny-llama"))
output_dir = Path(options.output_dir)

# %% Load the model (unsloth first, as in every Unsloth notebook)
from unsloth import FastLanguageModel, is_bfloat16_supported  # noqa: E402

import torch  # noqa: E402

max_seq_length = 2048  # longer than the tiny model's 512 positions: clamped, with a message
dtype = None
load_in_4bit = False  # MLX trains 16/32-bit LoRA; load_in_4bit=True is refused by name

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name=options.model_dir,
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

# %% Data: chat conversations rendered by the chat template, which also closes each turn with the EOS
from datasets import Dataset  # noqa: E402

from unsloth.chat_templates import get_chat_template, train_on_responses_only  # noqa: E402

tokenizer = get_chat_template(tokenizer, chat_template="zephyr")
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
conversations = [
    [{"role": "user", "content": question}, {"role": "assistant", "content": answer}] for question, answer in facts
]
dataset = Dataset.from_list([{"conversations": conversation} for conversation in conversations])


def formatting_prompts_func(examples):
    texts = [tokenizer.apply_chat_template(conversation, tokenize=False) for conversation in examples["conversations"]]
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
    gradient_accumulation_steps=2,
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
trainer = train_on_responses_only(trainer, instruction_part="<|user|>\n", response_part="<|assistant|>\n")

# %% Memory before training, as CUDA notebooks print it
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
free_bytes, total_bytes = torch.cuda.mem_get_info()
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB. {start_gpu_memory} GB of memory reserved.")

trainer_stats = trainer.train()
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training; peak reserved memory = {used_memory} GB.")

# %% Inference
from mlx_lm import generate  # noqa: E402

FastLanguageModel.for_inference(model)
messages = [{"role": "user", "content": "What colour is the kettle?"}]
prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
inputs = tokenizer([prompt], return_tensors="pt").to("cuda")
answer = generate(model, tokenizer, prompt=inputs["input_ids"][0].tolist(), max_tokens=12, verbose=False)
print(answer)

# %% Save the adapters and a GGUF of the merged model
model.save_pretrained(str(output_dir / "lora_model"))
tokenizer.save_pretrained(str(output_dir / "lora_model"))
gguf_path = model.save_pretrained_gguf(str(output_dir / "gguf_model"), tokenizer)

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
        }
    )
)
