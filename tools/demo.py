"""The main job: prepare a chat SFT dataset for training, sized by the worker-count policy.

By default it trains a fast BPE tokenizer on the shipped corpus (cached under build/) and builds a
deterministic 20,000-row chat dataset; `--jsonl` and `--tokenizer` point it at your own data instead.
It runs unsloth's SFT dataset config and the zoo's `sft_prepare_dataset` (auto stays auto until the map
knows its rows), then prints the policy's decision for that map, rows per second, wall time and the peak
memory of the whole process tree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence, TextIO

DEFAULT_ROWS = 20_000


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s demo --", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows of the built-in dataset (default 20,000)")
    parser.add_argument("--jsonl", type=Path, help="tokenize this JSONL file instead of the built-in dataset")
    parser.add_argument("--text-field", default="text", help="the JSONL field holding the text (default: text)")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer.json, or a folder holding one, instead of training one")
    parser.add_argument("--num-proc", type=int, default=None, help="request a worker count (default: let the policy decide)")
    parser.add_argument("--max-length", type=int, default=2048, help="truncate each row to this many tokens")
    return parser.parse_args(argv)


def _load_rows(args: argparse.Namespace) -> list:
    from tools import sft_data

    if args.jsonl is not None:
        return sft_data.read_jsonl_rows(args.jsonl, args.text_field)
    return [{"text": row["text"]} for row in sft_data.build_sft_rows(args.rows)]


def _load_tokenizer(args: argparse.Namespace):
    from tools import tokenizer_kit

    if args.tokenizer is not None:
        return tokenizer_kit.load_tokenizer(args.tokenizer)
    return tokenizer_kit.build_tokenizer()


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    args = _parse_args(argv)
    import datasets

    from tools.process_memory import ProcessTreeMemory
    from unsloth.trainers import SFTDatasetConfig
    from unsloth_zoo.dataset_utils import explain_sft_num_proc, sft_prepare_dataset

    try:
        rows = _load_rows(args)
    except (OSError, ValueError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    tokenizer = _load_tokenizer(args)
    dataset = datasets.Dataset.from_list(rows)
    config = SFTDatasetConfig(dataset_num_proc=args.num_proc, max_length=args.max_length)
    # The map's own decision, with the rows and closure it was sized with.
    decision = explain_sft_num_proc(dataset, tokenizer, config)

    with ProcessTreeMemory() as memory:
        started = time.perf_counter()
        prepared = sft_prepare_dataset(dataset, tokenizer, config)
        wall = time.perf_counter() - started

    tokens = sum(len(ids) for ids in prepared["input_ids"])
    out.write("\nThe policy's decision for this SFT map:\n")
    out.write(decision.format_table() + "\n\n")
    out.write(f"rows                     {len(prepared):,}\n")
    out.write(f"tokens                   {tokens:,}\n")
    out.write(f"wall time                {wall:.2f} s\n")
    out.write(f"rows per second          {len(prepared) / wall:,.0f}\n")
    out.write(f"peak memory (tree RSS)   {memory.peak_bytes / 2**20:,.0f} MiB over {memory.peak_processes} process(es)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
