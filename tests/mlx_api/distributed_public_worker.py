"""One rank of a notebook-style run through the public API (FastLanguageModel, UnslothTrainer, responses only).

Started by `test_distributed_public.py` with `MLX_RANK` / `MLX_HOSTFILE`, or neither for the one-process run.
Usage: `distributed_public_worker.py PLAN.json`; writes `<results>/<name>-rank<R>.npz` with the LoRA weights.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("UNSLOTH_MLX", "1")

import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402


def main(argv: list) -> int:
    from unsloth import FastLanguageModel, UnslothTrainer, UnslothTrainingArguments
    from unsloth.chat_templates import train_on_responses_only

    plan = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    rank = int(os.environ.get("MLX_RANK", "0"))
    model, tokenizer = FastLanguageModel.from_pretrained(plan["model_dir"])
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
    args = UnslothTrainingArguments(
        output_dir=plan["output_dir"].replace("{rank}", str(rank)),
        per_device_train_batch_size=plan["batch"],
        gradient_accumulation_steps=2,
        num_train_epochs=1,
        warmup_steps=0,
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="no",
        max_seq_length=64,
        disable_tqdm=True,
        seed=5,
    )
    trainer = UnslothTrainer(model, tokenizer, [{"text": text} for text in plan["texts"]], args=args)
    train_on_responses_only(trainer, instruction_part="<|user|>\n", response_part="<|assistant|>\n")
    trainer.train()
    if plan.get("save_dir"):
        # The notebook's save cells, run by every rank as every rank runs the script.
        saves = Path(plan["save_dir"].replace("{rank}", str(rank)))
        model.save_pretrained(str(saves / "lora_model"))
        tokenizer.save_pretrained(str(saves / "lora_model"))
        model.save_pretrained_merged(str(saves / "merged"), tokenizer, save_method="merged_16bit")
    weights = {name: np.array(value) for name, value in tree_flatten(model.trainable_parameters())}
    np.savez(Path(plan["results"]) / f"{plan['name']}-rank{rank}.npz", **weights)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    (Path(plan["results"]) / f"{plan['name']}-rank{rank}.json").write_text(json.dumps(losses), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
