"""One benchmark measurement in a fresh process: map a workload once with a given num_proc, along one path.

`python -m tools.bench_run WORKLOAD NUM_PROC [--path PATH]` prints one JSON object: wall time, peak memory of
the process tree, the pickled size of the mapped closure, the worker pools built and, with --count-pickled,
the bytes sent to workers. NUM_PROC is an integer or "none".

Paths: `direct` is `dataset.map(closure, num_proc=NUM_PROC)`. `zoo` is the zoo's `sft_prepare_dataset` and
`trl` the real `trl.SFTTrainer`'s dataset preparation (written against trl 1.16), both with unsloth's SFT
config built as a user builds it: NUM_PROC "auto" is the default config, an integer is `dataset_num_proc=`.
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
    # A lambda over the tokenizer: what users often write, and what stdlib pickle cannot measure.
    lambda_closure: bool = False


WORKLOADS = {
    workload.name: workload
    for workload in (
        Workload("a", 8_000, False, "8,000 rows, small tokenizer"),
        Workload("b", 80_000, False, "80,000 rows, small tokenizer"),
        Workload("c", 8_000, True, "8,000 rows, heavy tokenizer (128k vocab)"),
        Workload("d", 1_000, False, "1,000 rows, small tokenizer"),
        Workload("e", 1_000, True, "1,000 rows, lambda over the heavy tokenizer", lambda_closure=True),
        # The main job's own map: `python3 dev.py demo` prepares these rows with sft_prepare_dataset.
        Workload("f", 20_000, False, "20,000 chat rows, small tokenizer (the demo)"),
    )
}


class TokenizeRows:
    """The mapped closure: tokenizes the text column; holding the tokenizer is what makes it heavy."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, batch: dict) -> dict:
        from unsloth_zoo.dataset_utils import encode_texts

        return encode_texts(self.tokenizer, batch["text"], 2048)


PATHS = ("direct", "zoo", "trl")
# The direct path maps whole batches, as the zoo's SFT site does; the policy's row is asked for the same map.
DIRECT_BATCHED = True
AUTO = "auto"


def direct_closure(workload: Workload, tokenizer):
    if workload.lambda_closure:
        from unsloth_zoo.dataset_utils import encode_texts

        return lambda batch: encode_texts(tokenizer, batch["text"], 2048)
    return TokenizeRows(tokenizer)


def _zoo_path(workload: Workload, tokenizer, dataset, request):
    from unsloth.trainers import SFTDatasetConfig
    from unsloth_zoo.dataset_utils import sft_prepare_dataset

    config = SFTDatasetConfig() if request == AUTO else SFTDatasetConfig(dataset_num_proc=request)
    # The lambda workload formats through a closure holding the tokenizer, as notebooks often do.
    formatting = (
        (lambda batch: [text for text in batch["text"] if tokenizer is not None]) if workload.lambda_closure else None
    )
    return lambda: sft_prepare_dataset(dataset, tokenizer, config, formatting_func=formatting)


def _trl_path(workload: Workload, tokenizer, dataset, request):
    import trl  # noqa: F401  (patched by unsloth on import)
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    import unsloth  # noqa: F401
    from unsloth.trainers import SFTConfig

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|eos|>", pad_token="<|pad|>")
    fields = dict(output_dir="bench-out/trl", report_to="none", use_cpu=True, max_length=2048)
    config = SFTConfig(**fields) if request == AUTO else SFTConfig(**fields, dataset_num_proc=request)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(fast),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=dataset.select(range(8)), processing_class=fast)
    formatting = (lambda row: row["text"] if fast is not None else "") if workload.lambda_closure else None
    return lambda: trainer._prepare_dataset(dataset, fast, config, False, formatting, "bench")


def _count_pickled_bytes():
    """Wrap Pool.apply_async so every task sent to a worker is pickled once more and measured."""
    import dill
    import multiprocess.pool

    sent = []
    original = multiprocess.pool.Pool.apply_async

    def measuring_apply_async(self, func, args=(), kwds={}, *rest, **more):  # noqa: B006  (Pool.apply_async's own)
        sent.append(len(dill.dumps((func, args, kwds))))
        return original(self, func, args, kwds, *rest, **more)

    multiprocess.pool.Pool.apply_async = measuring_apply_async
    return sent


def measure(workload: Workload, num_proc, count_pickled: bool, path: str = "direct") -> dict:
    import datasets
    import dill

    from tools.kits import sft_data, tokenizer_kit
    from tools.kits.pool_spy import spy_pools
    from tools.kits.process_memory import ProcessTreeMemory

    datasets.disable_caching()
    datasets.disable_progress_bars()
    tokenizer = tokenizer_kit.build_heavy_tokenizer() if workload.heavy_tokenizer else tokenizer_kit.build_tokenizer()
    dataset = datasets.Dataset.from_list([{"text": row["text"]} for row in sft_data.build_sft_rows(workload.rows)])
    closure = direct_closure(workload, tokenizer)
    if path == "direct":

        def run():
            return dataset.map(
                closure, batched=DIRECT_BATCHED, num_proc=num_proc, load_from_cache_file=False, remove_columns=["text"]
            )

    else:
        run = (_zoo_path if path == "zoo" else _trl_path)(workload, tokenizer, dataset, num_proc)
    sent = _count_pickled_bytes() if count_pickled else None
    with spy_pools() as pools, ProcessTreeMemory() as memory:
        started = time.perf_counter()
        result = run()
        wall = time.perf_counter() - started
    if len(result) != workload.rows:
        raise RuntimeError(f"map returned {len(result)} rows, expected {workload.rows}")
    return {
        "workload": workload.name,
        "path": path,
        "num_proc": num_proc,
        "pools": pools.process_pools(),
        "wall_s": wall,
        "peak_tree_rss_bytes": memory.peak_bytes,
        "peak_processes": memory.peak_processes,
        "closure_pickle_bytes": len(dill.dumps(closure)),
        "bytes_pickled_to_workers": sum(sent) if sent is not None else None,
    }


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_run")
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("num_proc", help='an integer, "none" for in-process, or "auto" (a user path\'s default config)')
    parser.add_argument("--path", choices=PATHS, default="direct")
    parser.add_argument("--count-pickled", action="store_true", help="also measure the bytes pickled to workers")
    args = parser.parse_args(argv)
    text = args.num_proc.lower()
    num_proc = None if text == "none" else AUTO if text == AUTO else int(text)
    out = stdout if stdout is not None else sys.stdout
    out.write(json.dumps(measure(WORKLOADS[args.workload], num_proc, args.count_pickled, args.path)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
