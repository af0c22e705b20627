"""One benchmark measurement in a fresh process: map a workload once with a given num_proc.

`python -m tools.bench_run WORKLOAD NUM_PROC` prints one JSON object: wall time, peak memory of the
process tree, the pickled size of the mapped closure and, with --count-pickled, the bytes sent to workers.
NUM_PROC is an integer or "none".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Optional, Sequence, TextIO


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    rows: int
    heavy_tokenizer: bool
    description: str


WORKLOADS = {
    workload.name: workload
    for workload in (
        Workload("a", 8_000, False, "8,000 rows, small tokenizer"),
        Workload("b", 80_000, False, "80,000 rows, small tokenizer"),
        Workload("c", 8_000, True, "8,000 rows, heavy tokenizer (128k vocab)"),
        Workload("d", 1_000, False, "1,000 rows, small tokenizer"),
    )
}


class TokenizeRows:
    """The mapped closure: tokenizes the text column; holding the tokenizer is what makes it heavy."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, batch: dict) -> dict:
        from unsloth_zoo.dataset_utils import encode_texts

        return encode_texts(self.tokenizer, batch["text"], 2048)


def _count_pickled_bytes():
    """Wrap Pool.apply_async so every task sent to a worker is pickled once more and measured."""
    import dill
    import multiprocess.pool

    sent = []
    original = multiprocess.pool.Pool.apply_async

    def measuring_apply_async(self, func, args=(), kwds={}, *rest, **more):
        sent.append(len(dill.dumps((func, args, kwds))))
        return original(self, func, args, kwds, *rest, **more)

    multiprocess.pool.Pool.apply_async = measuring_apply_async
    return sent


def measure(workload: Workload, num_proc: Optional[int], count_pickled: bool) -> dict:
    import datasets
    import dill

    from tools import sft_data, tokenizer_kit
    from tools.process_memory import ProcessTreeMemory

    datasets.disable_caching()
    datasets.disable_progress_bars()
    tokenizer = tokenizer_kit.build_heavy_tokenizer() if workload.heavy_tokenizer else tokenizer_kit.build_tokenizer()
    dataset = datasets.Dataset.from_list([{"text": row["text"]} for row in sft_data.build_sft_rows(workload.rows)])
    closure = TokenizeRows(tokenizer)
    sent = _count_pickled_bytes() if count_pickled else None
    with ProcessTreeMemory() as memory:
        started = time.perf_counter()
        result = dataset.map(closure, batched=True, num_proc=num_proc, load_from_cache_file=False, remove_columns=["text"])
        wall = time.perf_counter() - started
    if len(result) != workload.rows:
        raise RuntimeError(f"map returned {len(result)} rows, expected {workload.rows}")
    return {
        "workload": workload.name,
        "num_proc": num_proc,
        "wall_s": wall,
        "peak_tree_rss_bytes": memory.peak_bytes,
        "peak_processes": memory.peak_processes,
        "closure_pickle_bytes": len(dill.dumps(closure)),
        "bytes_pickled_to_workers": sum(sent) if sent is not None else None,
    }


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_run")
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("num_proc", help='an integer, or "none" for in-process')
    parser.add_argument("--count-pickled", action="store_true", help="also measure the bytes pickled to workers")
    args = parser.parse_args(argv)
    num_proc = None if args.num_proc.lower() == "none" else int(args.num_proc)
    out = stdout if stdout is not None else sys.stdout
    out.write(json.dumps(measure(WORKLOADS[args.workload], num_proc, args.count_pickled)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
