"""The main job: prepare a chat SFT dataset for training, sized by the worker-count policy.

By default it trains a fast BPE tokenizer on the shipped corpus (cached in the user's cache folder, see
tools/kits/tokenizer_kit.py) and builds a deterministic 20,000-row chat dataset; `--jsonl` and `--tokenizer` point it at your own data instead.
It runs unsloth's SFT dataset config and the zoo's `sft_prepare_dataset` (auto stays auto until the map
knows its rows), then prints the policy's decision for that map, rows per second, wall time and the peak
memory of the whole process tree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, NoReturn, Optional, Sequence, TextIO

DEFAULT_ROWS = 20_000
# A row this long is tokenized whole before truncation: tens of megabytes took minutes and gigabytes, silently.
LONG_ROW_CHARACTERS = 1_000_000


class _UsageError(Exception):
    """A bad flag, reported as one `demo:` line instead of argparse's usage block and exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value

    return parse


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = _Parser(prog="nox -s demo --", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=_at_least(1), default=DEFAULT_ROWS, help="rows of the built-in dataset (default 20,000)"
    )
    parser.add_argument("--jsonl", type=Path, help="tokenize this JSONL file instead of the built-in dataset")
    parser.add_argument("--text-field", default="text", help="the JSONL field holding the text (default: text)")
    parser.add_argument(
        "--tokenizer", type=Path, help="a tokenizer.json, or a folder holding one, instead of training one"
    )
    parser.add_argument(
        "--num-proc",
        type=_at_least(0),
        default=None,
        help="request a worker count, 0 or 1 for in-process (default: the policy decides)",
    )
    parser.add_argument("--max-length", type=_at_least(1), default=2048, help="truncate each row to this many tokens")
    return parser.parse_args(argv)


def _load_rows(args: argparse.Namespace) -> list:
    from tools.kits import sft_data

    if args.jsonl is not None:
        return sft_data.read_jsonl_rows(args.jsonl, args.text_field)
    return [{"text": row["text"]} for row in sft_data.build_sft_rows(args.rows)]


def _load_tokenizer(args: argparse.Namespace):
    from tools.kits import tokenizer_kit

    if args.tokenizer is not None:
        return tokenizer_kit.load_tokenizer(args.tokenizer)
    return tokenizer_kit.build_tokenizer()


def _long_row_warning(rows: list, args: argparse.Namespace) -> Optional[str]:
    lengths = [len(row["text"]) for row in rows]
    longest = max(lengths)
    if longest < LONG_ROW_CHARACTERS:
        return None
    where = args.jsonl if args.jsonl is not None else "the built-in dataset"
    over = sum(length >= LONG_ROW_CHARACTERS for length in lengths)
    return (
        f"demo: warning: row {lengths.index(longest) + 1} of {where} holds {longest:,} characters "
        f"({over:,} row(s) of {LONG_ROW_CHARACTERS:,} or more); each is tokenized whole before truncation to "
        f"{args.max_length:,} tokens, which can take minutes and gigabytes"
    )


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    try:
        args = _parse_args(argv)
    except _UsageError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    import datasets

    from tools.kits.process_memory import ProcessTreeMemory
    from unsloth.trainers import SFTDatasetConfig
    from unsloth_zoo.dataset_utils import explain_sft_num_proc, sft_prepare_dataset

    try:
        rows = _load_rows(args)
        tokenizer = _load_tokenizer(args)
    except (OSError, ValueError) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    warning = _long_row_warning(rows, args)
    if warning is not None:
        print(warning, file=sys.stderr)
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
    out.write(
        f"peak memory (tree RSS)   {memory.peak_bytes / 2**20:,.0f} MiB over {memory.peak_processes} process(es)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
