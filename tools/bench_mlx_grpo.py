"""GRPO completion sampling, tokens per second: our batched sampling (what `GRPOTrainer` and `fast_generate` run)
against mlx_lm's own `batch_generate`, on the same LoRA model, prompts and sampler.

Each run completes `prompts x num_generations` rows of `max_tokens` new tokens at temperature 1. The clock covers
the whole call (prefill included) for both; runs alternate after one warm-up each, and the median is reported.
Throughput counts the completion tokens each returned, end-of-sequence tokens left out.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Dict, List


def _ours(model: Any, tokenizer: Any, rows: List[List[int]], max_tokens: int) -> int:
    from unsloth.mlx.models.batched_sampling import Sampling, sample_batch

    sampled = sample_batch(model, tokenizer, rows, Sampling(max_tokens=max_tokens, temperature=1.0, seed=0))
    return sum(len(row.token_ids) - (row.finish_reason == "stop") for row in sampled)


def _mlx_lm(model: Any, tokenizer: Any, rows: List[List[int]], max_tokens: int) -> int:
    import mlx.core as mx
    from mlx_lm.generate import batch_generate
    from mlx_lm.sample_utils import make_sampler

    mx.random.seed(0)
    result = batch_generate(
        model, tokenizer, rows, max_tokens=max_tokens, sampler=make_sampler(temp=1.0), return_token_ids=True
    )
    return sum(len(ids) for ids in result.token_ids)


def measure_grpo_sampling(folder: Path, rows: List[List[int]], max_tokens: int, repeats: int) -> Dict[str, Any]:
    """Median completion tokens/s of both samplers on `rows` (each prompt already repeated per generation)."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from unsloth.mlx import FastLanguageModel  # the MLX package itself: the bench runs off a Mac without the gate

    model, _ = FastLanguageModel.from_pretrained(str(folder), max_seq_length=len(rows[0]) + max_tokens + 1)
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16)
    model.eval()
    # mlx_lm's own tokenizer wrapper for both, so the two samplers see the same end-of-sequence ids.
    tokenizer = load_tokenizer(folder)
    runners = {"mlx_lm batch_generate": _mlx_lm, "unsloth GRPO sampling": _ours}
    rates: Dict[str, List[float]] = {name: [] for name in runners}
    for warm_up in runners.values():
        warm_up(model, tokenizer, rows, 4)
    for _ in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            tokens = run(model, tokenizer, rows, max_tokens)
            rates[name].append(tokens / (time.perf_counter() - start))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    base = medians["mlx_lm batch_generate"]
    return {
        "rows": len(rows),
        "max_tokens": max_tokens,
        "rates": rates,
        "tokens_per_second": medians,
        "ratio_to_mlx_lm": {name: rate / base for name, rate in medians.items()},
    }


def format_grpo_table(result: Dict[str, Any]) -> str:
    lines = [
        f"| GRPO sampling ({result['rows']} completions x {result['max_tokens']} tokens) | tokens/s (median) "
        "| vs mlx_lm |",
        "| --- | ---: | ---: |",
    ]
    for name, rate in result["tokens_per_second"].items():
        lines.append(f"| {name} | {rate:,.0f} | {result['ratio_to_mlx_lm'][name]:.2f}x |")
    return "\n".join(lines)
