"""A tokenization map whose closure holds a large block per batch, run inside a memory-limited cgroup.

`python oom_map.py naive|policy` sizes the map with the old heuristic or with the policy (which reads the
cgroup this process sits in) and prints one JSON line: the num_proc used and how the map ended.
"""

import faulthandler
import json
import os
import sys
import time

import datasets
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from unsloth_zoo.dataset_num_proc import explain_dataset_num_proc, map_failure_diagnostics

BLOCK_BYTES = 120 << 20
PARENT_PID = os.getpid()
HANG_SECONDS = 90
ROWS = 600
WORDS = ["the", "policy", "decides", "how", "many", "workers", "here"]

tokenizer = Tokenizer(WordLevel(vocab={word: i for i, word in enumerate(WORDS)}, unk_token="the"))
tokenizer.pre_tokenizer = Whitespace()


def _prefer_me_when_out_of_memory():
    # A worker killed while idle holds the pool's queue lock, and Pool.terminate() then waits on it forever;
    # steering the OOM killer to the busy, large workers keeps the run about what it tests.
    if os.getpid() != PARENT_PID:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")


def tokenize(batch):
    _prefer_me_when_out_of_memory()
    block = b"\xff" * BLOCK_BYTES  # touched pages, charged to the cgroup
    ids = [encoding.ids for encoding in tokenizer.encode_batch(batch["text"])]
    time.sleep(0.5)
    return {"input_ids": ids, "held": [len(block)] * len(ids)}


def main(mode):
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # a hang prints every thread's stack, then exits
    datasets.disable_caching()
    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_dict({"text": [" ".join(WORDS[: 1 + i % 7]) for i in range(ROWS)]})
    if mode == "naive":
        num_proc, decided_by, reason = (
            min(max(os.cpu_count() + 4, 2), 64),
            "heuristic",
            "min(max(cpu_count + 4, 2), 64)",
        )
    else:
        # No row count: the decision must come from the cgroup's memory, not from the dataset's size.
        decision = explain_dataset_num_proc()
        num_proc, decided_by, reason = decision.value, decision.decided_by, decision.steps[-1].reason
    result = {"mode": mode, "num_proc": num_proc, "decided_by": decided_by, "reason": reason}
    try:
        with map_failure_diagnostics(num_proc):
            dataset.map(tokenize, batched=True, batch_size=100, num_proc=num_proc, load_from_cache_file=False)
        result["outcome"] = "completed"
    except RuntimeError as error:
        result["outcome"] = "failed"
        result["message"] = str(error)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
