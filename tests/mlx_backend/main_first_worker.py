"""One rank of `test_launch_main_first.py`: tokenizes datasets through the trainer's own `tokenize_dataset`.

Started with `MLX_RANK` / `MLX_HOSTFILE`, as `mlx.launch --backend ring` starts each rank, or by
`mlx.launch --backend mpi`, whose ranks learn their place from Open MPI's variables. Usage:
`main_first_worker.py PLAN.json`. Each job writes `<results>/<job>-rank<R>.json` (the pools this rank built and
where the world places it) and `<results>/<job>/calls-rank<R>.txt` (when each of its rows was formatted). A job's `fail_on_main` gives the main rank rows without the text
field; `hang_on_main` makes the main rank's rows take an hour to format.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tools.kits.pool_spy import spy_pools
from tools.kits.tokenizer_kit import load_tokenizer
from unsloth_zoo.mlx.data import EncodeRows, tokenize_dataset
from unsloth_zoo.mlx.distributed import _exchange_hosts, current_world


def _slow_text(row: dict) -> str:
    time.sleep(3600)
    return row["text"]


def _recorded_text(row: dict) -> str:
    """The row's text, noting when this rank (or its map worker) formatted it."""
    with open(Path(os.environ["MAIN_FIRST_CALLS"]) / f"calls-rank{os.environ['MAIN_FIRST_RANK']}.txt", "a") as calls:
        calls.write(f"{time.time()}\n")
    return row["text"]


def run_job(job: dict, tokenizer, results: Path, rank: int) -> None:
    from datasets import Dataset, load_from_disk

    world = current_world()
    is_main = world.local_rank == 0
    if job.get("saved"):
        dataset = load_from_disk(job["saved"])
    else:
        dataset = Dataset.from_dict({"text": job["texts"]})
    if job.get("fail_on_main") and is_main:
        dataset = dataset.rename_column("text", "body")
    formatting = _slow_text if job.get("hang_on_main") and is_main else _recorded_text
    # Set before the map starts its workers, which inherit them.
    os.environ["MAIN_FIRST_CALLS"] = str(results / job["name"])
    os.environ["MAIN_FIRST_RANK"] = str(rank)
    (results / job["name"]).mkdir(exist_ok=True)
    encode = EncodeRows(tokenizer, "text", formatting, 64, True)
    with spy_pools() as pools:
        rows = tokenize_dataset(dataset, encode, job["num_proc"])
    report = {
        "pools": pools.process_pools(),
        "rows": len(rows),
        "first_row": rows[0].tolist(),
        "local_rank": world.local_rank,
        "local_size": world.local_size,
        "local_main": world.local_main,
        "exchanged": list(_exchange_hosts(world.group)),
    }
    (results / f"{job['name']}-rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")


def main(argv: list) -> int:
    plan = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(plan["tokenizer"])
    rank = current_world().rank
    for job in plan["jobs"]:
        run_job(job, tokenizer, Path(plan["results"]), rank)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
