"""Two steps of a LoRA run whose activations dwarf its weights, run inside a memory-limited cgroup.

`python guard_cgroup.py MODEL_DIR ROWS WIDTH OUTPUT_DIR` trains the model folder's llama on ROWS rows of WIDTH tokens a step
through the zoo's `MLXTrainer`, with the memory guard on, and prints one JSON line: whether it trained or the guard
stopped it, and the guard's message.
"""

import json
import sys

import numpy as np

from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig, apply_lora, load_model
from unsloth_zoo.mlx.memory_guard import MemoryBudgetExceeded


def main(model_dir: str, rows: int, width: int, output_dir: str) -> dict:
    import mlx.core as mx

    model, tokenizer = load_model(model_dir)
    mx.random.seed(0)
    apply_lora(model, rank=8, alpha=16)
    rng = np.random.default_rng(0)
    texts = [tokenizer.decode(rng.integers(5, 500, size=2 * width).tolist()) for _ in range(rows)]
    args = MLXTrainingConfig(
        per_device_train_batch_size=rows,
        max_steps=2,
        max_seq_length=width,
        save_strategy="no",
        output_dir=output_dir,
        mx_compile=False,
    )
    try:
        output = MLXTrainer(model, tokenizer, [{"text": text} for text in texts], args=args).train()
    except MemoryBudgetExceeded as error:
        return {"outcome": "stopped", "message": str(error), "budget": error.budget.limit}
    return {"outcome": "trained", "steps": output.global_step, "peak": int(mx.get_peak_memory())}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])), flush=True)
