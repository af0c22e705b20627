"""One rank (or a lone process) building a real TRL trainer through unsloth; writes what it saw as JSON.

Launched by `test_trl_ranks.py` under `torchrun` or `accelerate launch`, or alone as the single-process
reference. Host answers are faked the way the OS gives them (`os.cpu_count`, the affinity mask, psutil's free
memory, an empty cgroup tree); nothing of unsloth's own is patched.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

GIB = 1024**3
LOADING = "Loading cached processed dataset at"


def fake_host(cpus: int, free_gib: float, tree: Path) -> None:
    """Answer like a host with `cpus` CPUs, `free_gib` GiB available and no cgroup limits."""
    import psutil

    from tools.kits.fake_host import write_cgroup_tree

    os.cpu_count = lambda: cpus
    os.sched_getaffinity = lambda pid: set(range(cpus))
    real = psutil.virtual_memory
    psutil.virtual_memory = lambda: real()._replace(available=int(free_gib * GIB))
    write_cgroup_tree(tree, None)
    import unsloth.dataset_num_proc as twin
    import unsloth_zoo.dataset_num_proc as zoo

    for module in (zoo, twin):
        module.CGROUP_ROOT = str(tree / "cgroup")
        module.PROC_SELF_CGROUP = str(tree / "proc_self_cgroup")
        module.PROC_MEMINFO = str(tree / "no_meminfo")


class _CacheLog(logging.Handler):
    """Counts the maps that loaded a cache (logged by the parent; a map that computes logs in its workers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.loaded = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(LOADING):
            self.loaded += 1


def _tiny_llama(tokenizer, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def main(argv: list) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", choices=("SFT", "DPO"), required=True)
    parser.add_argument("--dataset", required=True, help="a save_to_disk folder, or memory:<rows>")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True, help="a folder: each rank writes rank-<RANK>.json there")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--free-gib", type=float, default=64.0)
    parser.add_argument("--rank1-free-gib", type=float, default=None, help="what local rank 1 sees instead")
    options = parser.parse_args(argv)

    # First: importing `tools` takes the repository root off sys.path, and `tests` is found through it.
    from tests.trl_real.test_trl_trainers import paired_rows, sft_rows

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    free = options.rank1_free_gib if local_rank == 1 and options.rank1_free_gib is not None else options.free_gib
    fake_host(options.cpus, free, Path(options.out) / f"host-{rank}")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    import unsloth  # noqa: F401  (patches trl when it is imported)
    import datasets
    import trl
    from transformers import PreTrainedTokenizerFast

    from tools.kits.pool_spy import spy_pools

    datasets.disable_progress_bars()
    log = _CacheLog()
    datasets.utils.logging.get_logger("datasets").addHandler(log)
    datasets.utils.logging.set_verbosity_info()

    rows = sft_rows if options.trainer == "SFT" else paired_rows
    if options.dataset.startswith("memory:"):
        dataset = datasets.Dataset.from_dict(rows(int(options.dataset.split(":", 1)[1])))
    else:
        dataset = datasets.load_from_disk(options.dataset)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(options.tokenizer)
    config_class = getattr(trl, f"{options.trainer}Config")
    config = config_class(
        output_dir=str(Path(options.out).parent / "trainer-output"),  # one folder for every rank, as users launch
        report_to="none",
        use_cpu=True,
        max_steps=1,
        per_device_train_batch_size=2,
        save_strategy="no",
        max_length=64,
    )
    models = {"model": _tiny_llama(tokenizer, 0)}
    if options.trainer == "DPO":
        models["ref_model"] = _tiny_llama(tokenizer, 1)
    with spy_pools() as pools:
        trainer = getattr(trl, f"{options.trainer}Trainer")(
            **models, args=config, train_dataset=dataset, processing_class=tokenizer
        )
    from accelerate.state import PartialState

    state = PartialState()
    report = {
        "rank": rank,
        "local_rank": local_rank,
        "num_processes": state.num_processes,
        "config_num_proc": config.dataset_num_proc,
        "pools": pools.process_pools(),
        "fingerprint": trainer.train_dataset._fingerprint,
        "rows": len(trainer.train_dataset),
        "loaded": log.loaded,
        "cached_dataset": bool(dataset.cache_files),
    }
    (Path(options.out) / f"rank-{rank}.json").write_text(json.dumps(report))
    state.wait_for_everyone()
    if state.num_processes > 1:
        import torch.distributed

        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
