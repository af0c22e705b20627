"""A CUDA-style Unsloth vision fine-tuning notebook, run unchanged on Apple silicon through the MLX backend.

Each `# %%` block is one cell as a vision notebook has it: `FastVisionModel` from a Hub id with `load_in_4bit`,
LoRA on vision and language layers, conversations with an image each, TRL's `SFTTrainer` with
`UnslothVisionDataCollator` and the vision `SFTConfig` settings, `for_inference` and `model.generate` on an image
with a `TextStreamer`, then the adapter saved and loaded back:

    python examples/mlx_vision_notebook.py --model-name unsloth/Qwen2.5-VL-7B-Instruct   # the Hugging Face cache
    python examples/mlx_vision_notebook.py --model-dir path/to/vision-model-folder

Without either it builds a tiny random-weight model (`--family qwen2_5_vl` or `gemma3`) into a temporary Hugging
Face cache and loads it by Hub id offline (needs the repository checkout). The images are coloured squares made
here, and the model learns to name the colour. The last line printed is a JSON summary.
"""

# %% Settings (a notebook's first cell; here they come from the command line)
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
parser.add_argument("--model-name", help="a Hugging Face Hub id (read through the Hugging Face cache, HF_HOME)")
parser.add_argument("--model-dir", help="a local vision-language model folder mlx-vlm loads")
parser.add_argument("--family", choices=("qwen2_5_vl", "gemma3"), default="qwen2_5_vl", help="the tiny model to build")
parser.add_argument("--output-dir", default="outputs_mlx_vision_notebook")
parser.add_argument("--max-steps", type=int, default=30)
options = parser.parse_args()

if options.model_name is None and options.model_dir is None:
    # A tiny model stored as a Hub cache entry, so the Hub id path runs without a download.
    hf_home = Path(tempfile.mkdtemp()) / "hf-home"
    os.environ["HF_HOME"] = str(hf_home)
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tools.kits.tiny_vlm_model import BUILDERS

    repository = hf_home / "hub" / f"models--unsloth-tiny--tiny-{options.family}"
    revision = "0" * 40
    BUILDERS[options.family](repository / "snapshots" / revision)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision)
    options.model_name = f"unsloth-tiny/tiny-{options.family}"
model_name = options.model_name or options.model_dir
output_dir = Path(options.output_dir)

# %% Load the model and its processor
from unsloth import FastVisionModel  # noqa: E402

model, tokenizer = FastVisionModel.from_pretrained(
    model_name,
    load_in_4bit=False,  # True quantizes the language model to 4 bits
    use_gradient_checkpointing="unsloth",
)

# %% LoRA on the vision and the language layers
model = FastVisionModel.get_peft_model(
    model,
    finetune_vision_layers=True,
    finetune_language_layers=True,
    finetune_attention_modules=True,
    finetune_mlp_modules=True,
    r=8,
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)

# %% The data: a question about an image, and its answer
from PIL import Image  # noqa: E402

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30)}
side = 56 if "qwen" in str(model_name) else 32
instruction = "What colour is this square?"


def convert_to_conversation(sample):
    conversation = [
        {
            "role": "user",
            "content": [{"type": "text", "text": instruction}, {"type": "image", "image": sample["image"]}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": sample["text"]}]},
    ]
    return {"messages": conversation}


dataset = [{"image": Image.new("RGB", (side, side), rgb), "text": f"It is {name}."} for name, rgb in COLOURS.items()]
converted_dataset = [convert_to_conversation(sample) for sample in dataset * 4]

# %% Train
from transformers import TextStreamer, TrainerCallback  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from unsloth.trainer import UnslothVisionDataCollator  # noqa: E402


class LossLog(TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


loss_log = LossLog()
FastVisionModel.for_training(model)
trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    data_collator=UnslothVisionDataCollator(model, tokenizer),
    train_dataset=converted_dataset,
    callbacks=[loss_log],
    args=SFTConfig(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        warmup_steps=2,
        max_steps=options.max_steps,
        learning_rate=5e-3,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir=str(output_dir),
        report_to="none",
        save_strategy="no",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=256,
    ),
)
trainer_stats = trainer.train()

# %% Inference on an image
FastVisionModel.for_inference(model)
answers = {}
for name, rgb in COLOURS.items():
    messages = [{"role": "user", "content": [{"type": "text", "text": instruction}, {"type": "image"}]}]
    input_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    inputs = tokenizer(
        Image.new("RGB", (side, side), rgb), input_text, add_special_tokens=False, return_tensors="pt"
    ).to("cuda")
    text_streamer = TextStreamer(tokenizer, skip_prompt=True)
    output = model.generate(**inputs, streamer=text_streamer, max_new_tokens=8, use_cache=True)
    answers[name] = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :].tolist(), skip_special_tokens=True)

# %% Save the adapter with the processor, load it back, and answer again
model.save_pretrained(str(output_dir / "lora_model"))
tokenizer.save_pretrained(str(output_dir / "lora_model"))
reloaded, reloaded_tokenizer = FastVisionModel.from_pretrained(str(output_dir / "lora_model"), load_in_4bit=False)
FastVisionModel.for_inference(reloaded)
inputs = reloaded_tokenizer(
    Image.new("RGB", (side, side), COLOURS["red"]), input_text, add_special_tokens=False, return_tensors="pt"
)
output = reloaded.generate(**inputs, max_new_tokens=8)
reloaded_answer = reloaded_tokenizer.decode(
    output[0, inputs["input_ids"].shape[1] :].tolist(), skip_special_tokens=True
)
print(json.dumps({"losses": loss_log.losses, "answers": answers, "reloaded_red": reloaded_answer}))
