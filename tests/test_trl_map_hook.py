"""The TRL map hook with another wrapper on `Dataset.map`: it sizes by datasets' own signature, or says it cannot.

Each case runs in a fresh interpreter, so the wrapper really is installed before (or after) `import unsloth`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PROBE = textwrap.dedent(
    """
    import json, sys, types, warnings
    sys.path.insert(0, {repo!r})
    import datasets
    datasets.disable_caching()
    own = datasets.Dataset.map

    def install(case):
        holder = types.SimpleNamespace(kept=own)
        if case == "hidden":
            # The original sits where no closure, global or __wrapped__ leads: the hook cannot find its signature.
            def map(self, *args, **kwargs):
                return holder.kept(self, *args, **kwargs)
        else:
            def map(self, *args, **kwargs):  # a profiler, tracker or test spy
                return own(self, *args, **kwargs)
        datasets.Dataset.map = map

    case = sys.argv[1]
    if case in ("before", "hidden"):
        install(case)
    import unsloth
    from unsloth.trl_patch.map_scope import install_map_hook, sized_maps
    from tools.kits.pool_spy import spy_pools

    if case == "after":
        install_map_hook()
        install(case)
    rows = datasets.Dataset.from_dict({{"x": list(range(1000))}})
    with spy_pools() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sized_maps(None):
            auto = rows.map(lambda batch: batch, batched=True, num_proc=2)
        with sized_maps(1):
            serial = rows.map(lambda batch: batch, batched=True, num_proc=1)
            again = rows.map(lambda batch: batch, batched=True, num_proc=1)
    print(json.dumps({{
        "pools": log.process_pools(),
        "rows": [len(auto), len(serial), len(again)],
        "warnings": [str(warning.message) for warning in caught],
    }}))
    """
)


def _probe(case: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "UNSLOTH_DATASET_NUM_PROC"}
    env["UNSLOTH_MLX"] = "0"
    code = PROBE.format(repo=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", code, case], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["before", "after"])
def test_a_plain_wrapper_still_gets_the_policys_num_proc(case):
    seen = _probe(case)
    # 1,000 rows auto-size in-process and an explicit 1 is in-process: no Pool(2), no Pool(1).
    assert seen["pools"] == []
    assert seen["rows"] == [1000, 1000, 1000]
    assert not [message for message in seen["warnings"] if "Dataset.map" in message]


def test_a_wrapper_hiding_datasets_map_is_named_once_and_maps_run_in_process():
    seen = _probe("hidden")
    assert seen["pools"] == []
    assert seen["rows"] == [1000, 1000, 1000]
    named = [message for message in seen["warnings"] if "__main__.install.<locals>.map" in message]
    assert len(named) == 1, seen["warnings"]
    assert "in-process" in named[0]


FILTER_PROBE = textwrap.dedent(
    """
    import json, sys, warnings
    sys.path.insert(0, {repo!r})
    import datasets
    own = datasets.Dataset.filter

    def filter(self, *args, **kwargs):  # a plain wrapper, put on before unsloth hooks the filter
        return own(self, *args, **kwargs)

    datasets.Dataset.filter = filter
    import unsloth
    from unsloth.trl_patch.map_scope import sized_maps

    rows = datasets.Dataset.from_dict({{"x": list(range(1000))}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with sized_maps(None):
            kept = {{n: rows.filter(lambda row: row["x"] % 2 == 0, num_proc=n) for n in (2, 3)}}
    print(json.dumps({{n: [len(ds), ds._fingerprint] for n, ds in kept.items()}}))
    """
)


def test_a_plain_wrapper_on_filter_still_gets_the_constant_num_proc():
    # TRL passes its config's num_proc to Dataset.filter by name, and the filter's fingerprint holds it: ranks whose
    # configs differ must still name one cache. Behind a `*args, **kwargs` wrapper the old hook bound against the
    # wrapper and left each rank's own num_proc in place.
    env = {key: value for key, value in os.environ.items() if key != "UNSLOTH_DATASET_NUM_PROC"}
    env["UNSLOTH_MLX"] = "0"
    code = FILTER_PROBE.format(repo=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["2"][0] == seen["3"][0] == 500
    assert seen["2"][1] == seen["3"][1], seen
