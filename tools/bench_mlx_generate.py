"""Generation tokens per second: `model.generate` (unsloth's MLX path) against `mlx_lm.stream_generate`.

Both decode greedily from the same prompt with the same weights (one model folder, loaded once by each), with
end-of-sequence stops turned off so every run makes exactly `new_tokens` tokens. The clock covers the whole call,
prompt processing included, for both; runs alternate and the median of the repeats is reported.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path


def time_ours(model, prompt: list, new_tokens: int) -> float:
    start = time.perf_counter()
    out = model.generate(input_ids=[prompt], max_new_tokens=new_tokens, eos_token_id=-1)
    elapsed = time.perf_counter() - start
    assert out.shape[1] == len(prompt) + new_tokens
    return elapsed


def time_mlx_lm(model, wrapper, prompt: list, new_tokens: int) -> float:
    from mlx_lm import stream_generate

    start = time.perf_counter()
    made = sum(1 for _ in stream_generate(model, wrapper, prompt, max_tokens=new_tokens))
    elapsed = time.perf_counter() - start
    assert made == new_tokens
    return elapsed


def measure_generation(folder: Path, prompt: list, new_tokens: int, repeats: int, warmup: int = 1) -> dict:
    from mlx_lm import load

    # The module itself, so the comparison runs whether or not this process switched unsloth's MLX gate on.
    from unsloth.mlx.models.language import FastLanguageModel

    ours, _ = FastLanguageModel.from_pretrained(str(folder))
    FastLanguageModel.for_inference(ours)
    theirs, wrapper = load(str(folder))
    wrapper.eos_token_ids = set()
    runners = {
        "mlx_lm.stream_generate": lambda: time_mlx_lm(theirs, wrapper, prompt, new_tokens),
        "unsloth model.generate": lambda: time_ours(ours, prompt, new_tokens),
    }
    for _ in range(warmup):
        for run in runners.values():
            run()
    seconds: dict = {name: [] for name in runners}
    order = list(runners)
    for _ in range(repeats):
        for name in order:
            seconds[name].append(runners[name]())
        order.reverse()  # ABBA: a slow drift of the machine weighs on both alike
    rates = {name: new_tokens / statistics.median(values) for name, values in seconds.items()}
    base = rates["mlx_lm.stream_generate"]
    return {
        "best_tokens_per_second": {name: new_tokens / min(values) for name, values in seconds.items()},
        "prompt_tokens": len(prompt),
        "new_tokens": new_tokens,
        "repeats": repeats,
        "seconds": seconds,
        "tokens_per_second": rates,
        "ratio_to_mlx_lm": {name: rate / base for name, rate in rates.items()},
    }


def format_generation_table(result: dict) -> str:
    lines = ["| generation | tokens/s (median) | tokens/s (best) | vs mlx_lm |", "| --- | ---: | ---: | ---: |"]
    for name, rate in result["tokens_per_second"].items():
        best = result["best_tokens_per_second"][name]
        lines.append(f"| {name} | {rate:,.0f} | {best:,.0f} | {result['ratio_to_mlx_lm'][name]:.2f}x |")
    return "\n".join(lines)
