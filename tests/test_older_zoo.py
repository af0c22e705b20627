"""`import unsloth` patches an older unsloth_zoo's SFT map site to size its workers through the policy.

Each case runs in a fresh `python -S` whose sys.path starts with a fixture zoo from tests/fixtures/older_zoo,
so the development environment's editable zoo (which has the policy) cannot answer for it. The host is
faked inside the subprocess with tools/kits/fake_host: 64 CPUs, `multiprocess` reporting fork, 256 GiB free.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OLDER_ZOO = REPO / "tests" / "fixtures" / "older_zoo"
NO_ASSIGNMENT_ZOO = OLDER_ZOO / "variants" / "no_assignment"
NO_SOURCE_ZOO = OLDER_ZOO / "variants" / "no_source"
LIBRARIES = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})

PREAMBLE = textwrap.dedent(
    """
    import json, logging, os, sys, tempfile, types
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, format="WARNING %(name)s %(message)s")
    sys.path[:0] = [{zoo!r}, {unsloth_dir!r}, {repo!r}]
    sys.path += {libraries!r}

    class RecordingDataset:
        '''Stands in for a datasets.Dataset: records the num_proc each map() call receives.'''
        column_names = ["text"]
        def __init__(self): self.num_procs = []
        def map(self, function, **kwargs):
            self.num_procs.append(kwargs["num_proc"])
            return self

    def fake_host(**env):
        from tools.kits.fake_host import HostProfile, Patcher, apply_host
        import unsloth_num_proc
        policy = unsloth_num_proc.load_policy()
        profile = HostProfile(cpu_count=64, available_memory_gb=256, env=env)
        apply_host(Patcher(), profile, Path(tempfile.mkdtemp()), [policy] if policy else [])

    def sft_num_proc(dataset_num_proc=None):
        from unsloth_zoo.dataset_utils import sft_prepare_dataset
        dataset = RecordingDataset()
        sft_prepare_dataset(dataset, len, types.SimpleNamespace(dataset_num_proc=dataset_num_proc))
        return dataset.num_procs[-1]
    """
)


def run_in_older_zoo(zoo: Path, body: str) -> tuple:
    """Run `body` after the preamble with `zoo` first on sys.path; (its last stdout line as JSON, stderr)."""
    code = PREAMBLE.format(zoo=str(zoo), unsloth_dir=str(REPO / "unsloth"), repo=str(REPO), libraries=LIBRARIES)
    code += textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def warning_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("WARNING unsloth.zoo_compat")]


pytestmark = pytest.mark.slow


def test_unpatched_fixture_asks_for_the_old_heuristics_count():
    # Without `import unsloth`: min(max(64 + 4, 2), 64) = 64; proves the fixture and the faked host.
    seen, _ = run_in_older_zoo(
        OLDER_ZOO,
        """
        fake_host()
        import unsloth_zoo.dataset_utils
        print(json.dumps({"num_proc": sft_num_proc(), "file": unsloth_zoo.dataset_utils.__file__}))
        """,
    )
    assert seen == {"num_proc": 64, "file": str(OLDER_ZOO / "unsloth_zoo" / "dataset_utils.py")}


def test_import_unsloth_makes_the_older_sft_map_ask_the_policy():
    seen, stderr = run_in_older_zoo(
        OLDER_ZOO,
        """
        import unsloth
        fake_host()
        print(json.dumps({
            "auto": sft_num_proc(None),  # 64 CPUs // 2 = 32, capped at 8
            "serial": sft_num_proc(1),
            "explicit": sft_num_proc(3),
            "policy": __import__("unsloth_num_proc").load_policy().__name__,
        }))
        """,
    )
    assert seen == {"auto": 8, "serial": None, "explicit": 3, "policy": "unsloth.dataset_num_proc"}
    assert warning_lines(stderr) == []


def test_the_hatch_reaches_the_patched_map_uncapped():
    seen, _ = run_in_older_zoo(
        OLDER_ZOO,
        """
        import unsloth
        fake_host(UNSLOTH_DATASET_NUM_PROC="24")
        print(json.dumps({"auto": sft_num_proc(None), "explicit": sft_num_proc(2)}))
        """,
    )
    assert seen == {"auto": 24, "explicit": 24}


def test_a_real_map_builds_the_policys_pool():
    seen, _ = run_in_older_zoo(
        OLDER_ZOO,
        """
        import datasets, multiprocess.pool
        from tools.kits.pool_spy import spy_pools
        import unsloth
        from unsloth_zoo.dataset_utils import sft_prepare_dataset
        dataset = datasets.Dataset.from_dict({"text": ["x" * (n % 7) for n in range(64)]})
        fake_host()
        sys.modules["multiprocess"] = multiprocess  # the real module's fork answer, so real workers start
        with spy_pools() as log:
            tokenized = sft_prepare_dataset(dataset, len, types.SimpleNamespace(dataset_num_proc=None))
        print(json.dumps({"pools": log.process_pools(), "first": tokenized[:3]["input_ids"]}))
        """,
    )
    assert seen == {"pools": [8], "first": [0, 1, 2]}  # len("") , len("x"), len("xx")


def test_patching_twice_changes_nothing():
    seen, stderr = run_in_older_zoo(
        OLDER_ZOO,
        """
        import unsloth
        from unsloth import zoo_compat
        import unsloth_zoo.dataset_utils as zoo_utils
        function = zoo_utils.sft_prepare_dataset
        code = function.__code__
        again = zoo_compat.patch_older_zoo()
        fake_host()
        print(json.dumps({
            "again": again,
            "same_code": function.__code__ is code,
            "same_function": zoo_utils.sft_prepare_dataset is function,
            "marker": getattr(function, zoo_compat.PATCHED_MARKER, None),
            "num_proc": sft_num_proc(),
            "file": code.co_filename,
            "helper": zoo_utils._unsloth_policy_num_proc is zoo_compat.policy_num_proc,
        }))
        """,
    )
    assert seen == {
        "again": True,
        "same_code": True,
        "same_function": True,
        "marker": True,
        "num_proc": 8,
        "file": str(OLDER_ZOO / "unsloth_zoo" / "dataset_utils.py"),
        "helper": True,
    }
    assert warning_lines(stderr) == []


def test_patched_code_keeps_the_zoos_line_numbers():
    seen, _ = run_in_older_zoo(
        OLDER_ZOO,
        """
        import unsloth_zoo.dataset_utils as zoo_utils
        before = zoo_utils.sft_prepare_dataset.__code__
        import unsloth
        after = zoo_utils.sft_prepare_dataset.__code__
        lines = lambda code: sorted({line for _, _, line in code.co_lines() if line is not None})
        print(json.dumps({"patched": after is not before, "same_lines": lines(after) == lines(before)}))
        """,
    )
    assert seen == {"patched": True, "same_lines": True}


def test_a_missing_target_warns_once_and_leaves_the_function_untouched():
    seen, stderr = run_in_older_zoo(
        NO_ASSIGNMENT_ZOO,
        """
        import unsloth_zoo.dataset_utils as zoo_utils
        code = zoo_utils.sft_prepare_dataset.__code__
        import unsloth
        again = unsloth.zoo_compat.patch_older_zoo()
        fake_host()
        print(json.dumps({"again": again, "same_code": zoo_utils.sft_prepare_dataset.__code__ is code,
                          "num_proc": sft_num_proc()}))
        """,
    )
    assert seen == {"again": False, "same_code": True, "num_proc": 64}
    warnings = warning_lines(stderr)
    assert len(warnings) == 1
    assert "unsloth_zoo.dataset_utils.sft_prepare_dataset" in warnings[0] and "num_proc=" in warnings[0]


def test_an_unreadable_target_warns_once_and_never_fails_the_import():
    seen, stderr = run_in_older_zoo(
        NO_SOURCE_ZOO,
        """
        import unsloth_zoo.dataset_utils as zoo_utils
        code = zoo_utils.sft_prepare_dataset.__code__
        import unsloth
        again = unsloth.zoo_compat.patch_older_zoo()
        print(json.dumps({"again": again, "same_code": zoo_utils.sft_prepare_dataset.__code__ is code}))
        """,
    )
    assert seen == {"again": False, "same_code": True}
    warnings = warning_lines(stderr)
    assert len(warnings) == 1 and "could not patch" in warnings[0] and "OSError" in warnings[0]


def test_an_unimportable_patch_module_never_fails_the_import():
    seen, _ = run_in_older_zoo(
        OLDER_ZOO,
        """
        sys.modules["unsloth.zoo_compat"] = None  # importing it now raises ImportError
        import unsloth
        import unsloth_zoo.dataset_utils as zoo_utils
        fake_host()
        print(json.dumps({"version": unsloth.__version__, "num_proc": sft_num_proc()}))
        """,
    )
    assert seen["num_proc"] == 64 and seen["version"]


def test_a_zoo_with_the_policy_is_left_alone():
    from unsloth import zoo_compat
    from unsloth_zoo import dataset_utils

    code = dataset_utils.sft_prepare_dataset.__code__
    assert zoo_compat.patch_older_zoo() is False
    assert dataset_utils.sft_prepare_dataset.__code__ is code
    assert not hasattr(dataset_utils.sft_prepare_dataset, zoo_compat.PATCHED_MARKER)
    assert not hasattr(dataset_utils, zoo_compat.HELPER_NAME)
