"""LoRA trains the Falcon H1 notebook's tiny falcon_h1 with the family's own muP multipliers: the loss falls well
below ln(vocab), where random weights under the 0.007 head multiplier used to hold it."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import mlx.core as mx

ROOT = Path(__file__).resolve().parents[2]
# The Falcon H1 notebook's target list.
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ROWS = [
    {"text": f"### Instruction:\nName kettle {n % 4}.\n### Response:\nKettle {n % 4} boils water."} for n in range(32)
]


def _notebook_families() -> object:
    spec = importlib.util.spec_from_file_location("_families", ROOT / "examples" / "notebooks" / "_families.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lora_lowers_the_tiny_falcon_h1s_loss_with_the_familys_multipliers(tmp_path: Path) -> None:
    from mlx_lm.models.falcon_h1 import ModelArgs

    from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments

    families = _notebook_families()
    config = families.NEW_FAMILY_CONFIGS["falcon_h1"]  # type: ignore[attr-defined]
    assert not any("multiplier" in key for key in config)  # mlx_lm's defaults, the 0.5B checkpoint's values
    assert ModelArgs.lm_head_multiplier / ModelArgs.embedding_multiplier < 0.01
    folder = families.build_notebook_model(tmp_path / "falcon_h1", "falcon_h1")  # type: ignore[attr-defined]
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder), max_seq_length=64, load_in_4bit=True)
    assert float(mx.std(model(mx.array([[5, 9, 17, 33, 40, 2]])))) > 0.1  # logits not all near 0
    model = FastLanguageModel.get_peft_model(model, r=16, lora_alpha=16, target_modules=TARGETS, random_state=3407)
    arguments = UnslothTrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_steps=24,
        warmup_steps=0,
        learning_rate=2e-3,
        logging_steps=1,
        save_strategy="no",
        max_seq_length=48,
        disable_tqdm=True,
    )
    trainer = UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=ROWS, args=arguments)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.8 * min(losses[0], math.log(512)), losses
