"""Tokens per second with `packing=True` against `packing=False`: the same UnslothTrainer, model and rows.

The rows have random lengths (an eighth of `--seq-len` up to all of it), as chat datasets do, so unpacked batches
carry padding that packed sequences do not. Each setting trains one epoch untimed (tracing and first calls), then
one timed epoch per repeat; throughput counts the real target tokens, sum(length - 1), per second of wall time.
Called by tools/bench_mlx.py (`--packing-rows`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from pathlib import Path


def varied_rows(count: int, longest: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Seeded random rows of `longest // 8` to `longest` ids, avoiding the special ids 0-4."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(longest // 8, 2), longest + 1, size=count)
    return [rng.integers(5, vocab_size, size=int(length)).tolist() for length in lengths]


def _train_seconds(folder: Path, rows: list, options: argparse.Namespace, packing: bool, output: Path) -> float:
    from unsloth.mlx.training.arguments import UnslothTrainingArguments
    from unsloth.mlx.training.trainer import UnslothTrainer
    from tools.bench_mlx_inputs import fresh_lora_model

    model, tokenizer = fresh_lora_model(folder, options.rank, options.seed)
    args = UnslothTrainingArguments(
        output_dir=str(output),
        per_device_train_batch_size=options.batch,
        num_train_epochs=1,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        save_strategy="no",
        max_seq_length=options.seq_len,
        dataset_order="sequential",
        packing=packing,
        disable_tqdm=True,
        logging_steps=10**6,
    )
    hf_tokenizer = getattr(tokenizer, "_tokenizer", tokenizer)
    trainer = UnslothTrainer(model, hf_tokenizer, [{"input_ids": row} for row in rows], args=args)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    return time.perf_counter() - start


def measure_packing(folder: Path, options: argparse.Namespace, workdir: Path) -> dict:
    from unsloth.mlx.training.packing import best_fit_decreasing

    rows = varied_rows(options.packing_rows, options.seq_len, options.vocab, options.seed + 2)
    targets = sum(len(row) - 1 for row in rows)
    seconds: dict = {"packing off": [], "packing on": []}
    for packing, name in ((False, "packing off"), (True, "packing on")):
        _train_seconds(folder, rows, options, packing, workdir / f"warm-{packing}")
        for repeat in range(options.repeats):
            seconds[name].append(_train_seconds(folder, rows, options, packing, workdir / f"run-{packing}-{repeat}"))
    return {
        "rows": len(rows),
        "packed_sequences": len(best_fit_decreasing([len(row) for row in rows], options.seq_len)),
        "target_tokens": targets,
        "seconds": seconds,
        "tokens_per_second": {name: targets / statistics.median(values) for name, values in seconds.items()},
    }


def format_packing_table(result: dict) -> str:
    lines = [
        f"| packing ({result['rows']} rows -> {result['packed_sequences']} packed) | tokens/s (median) |",
        "| --- | ---: |",
    ]
    for name, rate in result["tokens_per_second"].items():
        lines.append(f"| {name} | {rate:,.0f} |")
    return "\n".join(lines)
