"""Studio's backend (`unsloth_studio`): its worker-count rules, config and map sites, on faked hosts.

Only the operating system's answers are faked (tools/kits/fake_host, a fake `torch` module object for
"torch already imported", import blockers in subprocesses). Numbers in comments are the hand
arithmetic behind each expected value.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Optional

import datasets
import multiprocess
import multiprocess.pool  # noqa: F401  imported for real before any fake `multiprocess` is placed
import pytest

import unsloth_studio
from tools.constants_canary import read_literal_constants
from tools.kits.fake_host import CgroupSpec, HostProfile, apply_host
from tools.kits.pool_spy import spy_pools
from unsloth_studio import data_formats, map_site, training
from unsloth_studio.picklability import can_ship_to_workers
from unsloth_zoo import dataset_num_proc as zoo_policy
from unsloth_zoo.dataset_utils import sft_prepare_dataset

REPO = Path(__file__).resolve().parent.parent
ZOO_POLICY_FILE = REPO / "zoo" / "unsloth_zoo" / "dataset_num_proc.py"
GENERATED_POLICY_FILE = REPO / "unsloth" / "unsloth" / "dataset_num_proc.py"
HATCH = "UNSLOTH_DATASET_NUM_PROC"
CUDA = "CUDA_VISIBLE_DEVICES"


@pytest.fixture
def host(monkeypatch, tmp_path):
    """Apply a simulated host (keyword arguments are HostProfile fields) with no GPU list and no torch imported."""
    counter = itertools.count()
    monkeypatch.delenv(CUDA, raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)

    def apply(**fields) -> HostProfile:
        profile = HostProfile(**fields)
        apply_host(monkeypatch, profile, tmp_path / f"host{next(counter)}", [zoo_policy])
        return profile

    return apply


@pytest.fixture
def real_pool_host(host, monkeypatch):
    """A simulated host whose `multiprocess` is the real one, so real worker pools can start on it."""

    def apply(**fields) -> HostProfile:
        profile = host(**fields)
        # The real module's answer (fork, on Linux) stands in for the fake, which cannot build pools.
        monkeypatch.setitem(sys.modules, "multiprocess", multiprocess)
        return profile

    return apply


def fake_torch(monkeypatch, *, cuda_devices=None, xpu=None) -> types.ModuleType:
    """Place a `torch` module object in sys.modules, as if the process had imported torch already."""
    torch = types.ModuleType("torch")
    if cuda_devices is not None:
        torch.cuda = types.SimpleNamespace(device_count=cuda_devices)
    if xpu is not None:
        torch.xpu = xpu
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def xpu(available=True, initialized=True) -> types.SimpleNamespace:
    return types.SimpleNamespace(is_available=lambda: available, is_initialized=lambda: initialized)


def both_layers(desired=None, **kwargs) -> tuple:
    """(map encoding, config encoding) of dataset_map_num_proc(desired)."""
    return (
        unsloth_studio.dataset_map_num_proc(desired, **kwargs),
        unsloth_studio.dataset_map_num_proc(desired, serial_as_none=False, **kwargs),
    )


# safe_num_proc ---------------------------------------------------------------------------------


@pytest.mark.parametrize("platform", ["win32", "darwin"])
@pytest.mark.parametrize("desired", [None, 6, 64])
def test_safe_num_proc_is_in_process_on_windows_and_macos(host, platform, desired):
    host(platform=platform, start_method="fork", cpu_count=64)
    assert unsloth_studio.safe_num_proc(desired) == 1


@pytest.mark.parametrize(
    "cpu_count, affinity, expected",
    [
        (12, None, 4),  # 12 // 3
        (64, 9, 3),  # the affinity mask allows 9: 9 // 3
        (9, 12, 3),  # os.cpu_count is the smaller: 9 // 3
        (24, None, 8),  # 24 // 3 = 8, exactly the cap
        (30, None, 8),  # 30 // 3 = 10, capped at 8
        (64, None, 8),  # 21, capped at 8
        (2, None, 1),  # 2 // 3 = 0, never below 1
        (None, None, 1),  # CPU count unknown
    ],
)
def test_safe_auto_is_a_third_of_usable_cpus_capped_at_eight(host, cpu_count, affinity, expected):
    host(cpu_count=cpu_count, affinity=affinity)
    assert unsloth_studio.safe_num_proc() == expected
    assert unsloth_studio.safe_num_proc(None) == expected


@pytest.mark.parametrize(
    "desired, expected", [(6, 6), (12, 12), (16, 12), (1, 1), (0, 1), (-3, 1), (True, 4), ("6", 4)]
)
def test_safe_explicit_request_is_kept_within_the_usable_cpus(host, desired, expected):
    # 12 CPUs: integers up to 12 are kept, below 1 become 1; a bool or a string is no count, so auto gives 12 // 3.
    host(cpu_count=12)
    assert unsloth_studio.safe_num_proc(desired) == expected


@pytest.mark.parametrize(
    "listed, auto, explicit",
    [
        ("0,1", 4, 4),  # two GPUs: auto 8 and explicit 6 both capped at 4
        ("0,1,2,3,4,5,6,7", 4, 4),
        ("0,,2", 4, 4),  # two non-empty entries
        ("3", 8, 6),  # one GPU: no cap
        ("", 8, 6),  # empty: no GPU
        (" , ", 8, 6),  # no non-empty entry
    ],
)
def test_safe_num_proc_caps_at_four_with_several_visible_gpus(host, monkeypatch, listed, auto, explicit):
    host(cpu_count=64)
    monkeypatch.setenv(CUDA, listed)
    assert unsloth_studio.safe_num_proc() == auto
    assert unsloth_studio.safe_num_proc(6) == explicit


def test_gpu_count_comes_from_an_already_imported_torch_when_no_list_is_set(host, monkeypatch):
    host(cpu_count=64)
    fake_torch(monkeypatch, cuda_devices=lambda: 2)
    assert unsloth_studio.safe_num_proc() == 4
    monkeypatch.setenv(CUDA, "0")  # the environment list wins over torch's count
    assert unsloth_studio.safe_num_proc() == 8


def test_a_failing_torch_gpu_count_means_no_gpu(host, monkeypatch):
    host(cpu_count=64)

    def broken_count():
        raise RuntimeError("simulated: CUDA driver missing")

    fake_torch(monkeypatch, cuda_devices=broken_count)
    assert unsloth_studio.safe_num_proc() == 8


def test_torch_is_never_imported_to_count_gpus(host):
    host(cpu_count=64)
    assert unsloth_studio.safe_num_proc() == 8
    assert unsloth_studio.dataset_map_num_proc() == 8
    assert "torch" not in sys.modules


# dataset_map_num_proc: 1. the escape hatch ------------------------------------------------------


def test_hatch_count_goes_first_and_studio_never_caps_it(host, monkeypatch):
    host(cpu_count=64, env={HATCH: "12"})
    monkeypatch.setenv(CUDA, "0,1,2")
    fake_torch(monkeypatch, xpu=xpu())
    assert both_layers() == (12, 12)
    assert both_layers(2) == (12, 12)


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_hatch_count_beats_the_platform_veto(host, platform):
    host(platform=platform, start_method="spawn", cpu_count=4, env={HATCH: "6"})
    assert both_layers() == (6, 6)


def test_hatch_serial_is_encoded_per_layer(host):
    host(cpu_count=64, env={HATCH: "0"})
    assert both_layers(8) == (None, 1)  # fork works here: a config writes in-process as 1


def test_hatch_serial_where_workers_cannot_run_is_none_in_both_layers(host):
    host(platform="darwin", start_method="fork", cpu_count=64, env={HATCH: "none"})
    assert both_layers(8) == (None, None)


# dataset_map_num_proc: 2. Windows and macOS -----------------------------------------------------


@pytest.mark.parametrize("platform", ["darwin", "win32"])
@pytest.mark.parametrize("desired", [None, 1, 6])
def test_windows_and_macos_run_in_process_in_both_layers(host, platform, desired):
    # macOS still offers fork, and it is pinned here: Studio refuses it anyway.
    host(platform=platform, start_method="fork", start_method_pinned=True, cpu_count=64)
    assert both_layers(desired) == (None, None)


# dataset_map_num_proc: 3. an initialised Intel XPU ----------------------------------------------


def test_initialised_xpu_means_in_process_for_the_layer(host, monkeypatch):
    host(cpu_count=64)
    fake_torch(monkeypatch, xpu=xpu(available=True, initialized=True))
    assert both_layers() == (None, 1)
    assert both_layers(6) == (None, 1)


@pytest.mark.parametrize(
    "xpu_namespace",
    [
        xpu(available=True, initialized=False),
        xpu(available=False, initialized=True),
        types.SimpleNamespace(is_available=lambda: True),  # an older torch without is_initialized
        None,  # a torch without the xpu module
    ],
)
def test_xpu_not_initialised_leaves_the_policy_to_decide(host, monkeypatch, xpu_namespace):
    host(cpu_count=64)
    fake_torch(monkeypatch, xpu=xpu_namespace)
    assert both_layers() == (8, 8)  # 64 // 2 = 32, capped at 8


def test_xpu_probe_that_raises_leaves_the_policy_to_decide(host, monkeypatch):
    host(cpu_count=64)

    def broken():
        raise RuntimeError("simulated: XPU runtime failure")

    fake_torch(monkeypatch, xpu=types.SimpleNamespace(is_available=lambda: True, is_initialized=broken))
    assert both_layers() == (8, 8)


# dataset_map_num_proc: 4. the policy, given the request as written -------------------------------


def test_auto_reaches_the_affinity_aware_policy(host):
    # The policy gives half of the 6 CPUs the mask allows (3); Studio's own third would be 2.
    host(cpu_count=64, affinity=6)
    assert both_layers() == (3, 3)


def test_auto_reaches_the_cgroup_aware_policy(host):
    # A v2 quota of 4 CPUs on a 64-CPU host: the policy gives 4 // 2 = 2.
    host(cpu_count=64, cgroup=CgroupSpec(cpu_quota=4.0))
    assert both_layers() == (2, 2)


def test_memory_poor_host_runs_in_process_through_the_policy(host):
    # 3 GiB available: floor(3 * 0.5 / 1) = 1 affordable worker, so in-process.
    host(cpu_count=64, available_memory_gb=3.0)
    assert both_layers() == (None, 1)


def test_explicit_and_serial_requests_reach_the_policy(host):
    host(cpu_count=64)
    assert both_layers(6) == (6, 6)
    assert both_layers(16) == (16, 16)  # explicit requests are not capped by the policy's auto cap
    assert both_layers(1) == (None, 1)
    assert both_layers(0) == (None, 1)


def test_rows_reach_the_policy(host):
    host(cpu_count=64)
    assert both_layers(rows=12000) == (2, 2)  # 12000 // 5000 = 2 workers
    assert both_layers(rows=100) == (None, 1)  # 100 // 5000 = 0: in-process


def test_non_fork_start_method_is_the_policys_veto(host):
    host(cpu_count=64, start_method="spawn")
    assert both_layers(6) == (None, None)


# dataset_map_num_proc: 5. Studio's multi-GPU cap on the policy's answer --------------------------


@pytest.mark.parametrize(
    "listed, auto, explicit_twelve, explicit_three",
    [("0,1", 4, 4, 3), ("0,1,2,3", 4, 4, 3), ("0", 8, 12, 3), ("", 8, 12, 3)],
)
def test_several_gpus_cap_the_policys_answer_at_four(host, monkeypatch, listed, auto, explicit_twelve, explicit_three):
    host(cpu_count=64)
    monkeypatch.setenv(CUDA, listed)
    assert both_layers() == (auto, auto)
    assert both_layers(12) == (explicit_twelve, explicit_twelve)
    assert both_layers(3) == (explicit_three, explicit_three)
    assert both_layers(1) == (None, 1)  # in-process stays in-process


def test_gpus_seen_by_an_imported_torch_cap_the_policys_answer(host, monkeypatch):
    host(cpu_count=64)
    fake_torch(monkeypatch, cuda_devices=lambda: 8)
    assert both_layers() == (4, 4)


# the canary: Studio's restated cap equals the policy's ------------------------------------------


def cap_disagreement(policy_file: Path) -> Optional[str]:
    """Why STUDIO_NUM_PROC_CAP differs from the policy file's AUTO_NUM_PROC_CAP, or None when they agree."""
    policy_cap = read_literal_constants(policy_file).get("AUTO_NUM_PROC_CAP")
    if policy_cap != unsloth_studio.STUDIO_NUM_PROC_CAP:
        return f"{policy_file} has AUTO_NUM_PROC_CAP = {policy_cap!r}, Studio has {unsloth_studio.STUDIO_NUM_PROC_CAP}"
    return None


@pytest.mark.parametrize("policy_file", [ZOO_POLICY_FILE, GENERATED_POLICY_FILE], ids=["zoo", "generated copy"])
def test_canary_studio_cap_equals_the_policy_cap(policy_file):
    assert cap_disagreement(policy_file) is None


@pytest.mark.parametrize(
    "text", ["AUTO_NUM_PROC_CAP = 6\n", "OTHER = 8\n", "AUTO_NUM_PROC_CAP = 8\nAUTO_NUM_PROC_CAP = 12\n"]
)
def test_canary_fails_when_the_policy_cap_differs(tmp_path, text):
    policy_file = tmp_path / "dataset_num_proc.py"
    policy_file.write_text(text)
    assert cap_disagreement(policy_file) is not None


def test_canary_reads_without_importing(tmp_path):
    policy_file = tmp_path / "dataset_num_proc.py"
    policy_file.write_text("raise SystemExit('imported')\nAUTO_NUM_PROC_CAP = 8\n")
    assert cap_disagreement(policy_file) is None


# training config --------------------------------------------------------------------------------


def format_rows(batch: dict) -> list:
    return [f"Q: {question}" for question in batch["question"]]


class FormatterHoldingAGenerator:
    """A formatting function neither pickle nor dill can serialise, as a closure over live state would be."""

    def __init__(self) -> None:
        self.pending = (number for number in range(3))

    def __call__(self, batch: dict) -> list:
        return list(batch["text"])


def test_can_ship_to_workers_follows_dill():
    assert can_ship_to_workers(format_rows)
    assert can_ship_to_workers(lambda batch: batch)  # dill, which datasets' pools use, takes lambdas
    assert not can_ship_to_workers(FormatterHoldingAGenerator())


def test_can_ship_to_workers_uses_pickle_when_dill_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "dill", None)
    assert can_ship_to_workers(format_rows)
    assert not can_ship_to_workers(lambda batch: batch)


def test_config_asks_for_auto_when_the_formatting_function_pickles(host):
    host(cpu_count=64)
    assert training.build_sft_config().dataset_num_proc == 8
    assert training.build_sft_config(formatting_func=format_rows).dataset_num_proc == 8
    assert training.build_sft_config(formatting_func=format_rows, rows=100).dataset_num_proc == 1


def test_config_writes_in_process_as_one_when_the_formatting_function_cannot_pickle(host, monkeypatch):
    host(cpu_count=64)
    monkeypatch.setenv(CUDA, "0,1")
    config = training.build_sft_config(formatting_func=FormatterHoldingAGenerator(), max_seq_length=512)
    assert config.dataset_num_proc == 1
    assert config.max_seq_length == 512


def test_config_on_macos_is_none(host):
    host(platform="darwin", start_method="fork", cpu_count=64)
    assert training.build_sft_config(formatting_func=FormatterHoldingAGenerator()).dataset_num_proc is None
    assert training.build_sft_config().dataset_num_proc is None


@pytest.mark.slow
def test_config_one_keeps_the_trainer_map_in_process(real_pool_host):
    # The zoo's SFT map reads dataset_num_proc=1 as in-process; None there would have auto-sized to 2 workers.
    real_pool_host(cpu_count=64)
    config = training.build_sft_config(formatting_func=FormatterHoldingAGenerator())
    dataset = datasets.Dataset.from_dict({"text": [f"row {number}" for number in range(6000)]})
    tokenizer = types.SimpleNamespace(encode_batch=lambda texts: [types.SimpleNamespace(ids=[len(t)]) for t in texts])
    with spy_pools() as log:
        tokenized = sft_prepare_dataset(dataset, tokenizer, config)
    assert log.process_pools() == []
    assert tokenized[0]["input_ids"] == [5]  # len("row 0")


# map sites: format conversion and chat template -------------------------------------------------

ALPACA_ROWS = {
    "instruction": ["Name the colour of the sky.", "Add the numbers."],
    "input": ["", "2 and 3"],
    "output": ["Blue.", "5"],
}


def test_alpaca_rows_become_chat_messages():
    converted = data_formats.alpaca_to_chat(datasets.Dataset.from_dict(ALPACA_ROWS), num_proc=1)
    assert converted.column_names == ["messages"]
    assert converted[0]["messages"] == [
        {"role": "user", "content": "Name the colour of the sky."},
        {"role": "assistant", "content": "Blue."},
    ]
    assert converted[1]["messages"] == [
        {"role": "user", "content": "Add the numbers.\n\n2 and 3"},
        {"role": "assistant", "content": "5"},
    ]


def test_alpaca_rows_without_an_input_column_convert():
    rows = {"instruction": ["Say hi."], "output": ["Hi."]}
    converted = data_formats.alpaca_to_chat(datasets.Dataset.from_dict(rows), num_proc=1)
    assert converted[0]["messages"][0] == {"role": "user", "content": "Say hi."}


def test_chat_template_renders_each_turn_with_its_markers():
    converted = data_formats.alpaca_to_chat(datasets.Dataset.from_dict(ALPACA_ROWS), num_proc=1)
    rendered = data_formats.apply_chat_template(converted, num_proc=1)
    assert rendered[1]["text"] == "<|user|>\nAdd the numbers.\n\n2 and 3<|eos|>\n<|assistant|>\n5<|eos|>\n"
    assert data_formats.render_chat([{"role": "system", "content": "Be brief."}], add_generation_prompt=True) == (
        "<|system|>\nBe brief.<|eos|>\n<|assistant|>\n"
    )
    with pytest.raises(ValueError, match="tool"):
        data_formats.render_chat([{"role": "tool", "content": "{}"}])


@pytest.mark.slow
def test_format_sites_build_the_pool_the_studio_rules_allow(real_pool_host):
    rows = {name: values * 32 for name, values in ALPACA_ROWS.items()}  # 64 rows
    real_pool_host(cpu_count=64)
    with spy_pools() as log:
        converted = data_formats.alpaca_to_chat(datasets.Dataset.from_dict(rows), num_proc=2)
        rendered = data_formats.apply_chat_template(converted, num_proc=2)
    assert log.process_pools() == [2, 2]
    assert rendered[63]["text"] == "<|user|>\nAdd the numbers.\n\n2 and 3<|eos|>\n<|assistant|>\n5<|eos|>\n"


@pytest.mark.slow
def test_format_sites_keep_small_datasets_in_process(real_pool_host):
    # Auto on 64 CPUs would be 8 workers, but 2 rows give no worker its 5000 rows.
    real_pool_host(cpu_count=64)
    with spy_pools() as log:
        converted = data_formats.alpaca_to_chat(datasets.Dataset.from_dict(ALPACA_ROWS))
        rendered = data_formats.apply_chat_template(converted)
    assert log.process_pools() == []
    assert rendered[0]["text"] == "<|user|>\nName the colour of the sky.<|eos|>\n<|assistant|>\nBlue.<|eos|>\n"


def double_rows(example: dict) -> dict:
    numbers = example["n"]
    return {"n": [2 * n for n in numbers] if isinstance(numbers, list) else 2 * numbers}


@pytest.mark.slow
@pytest.mark.parametrize("batched, pools", [(True, []), (False, [2])])
def test_a_studio_map_tells_the_policy_whether_it_is_batched(real_pool_host, batched, pools):
    # 10,000 rows give 2 per-row workers 5,000 rows each, but not 2 batched workers 12,500 rows each.
    real_pool_host(cpu_count=64)
    dataset = datasets.Dataset.from_dict({"n": list(range(10_000))})
    with spy_pools() as log:
        doubled = map_site.run_map(dataset, double_rows, desc="doubling", batched=batched, load_from_cache_file=False)
    assert log.process_pools() == pools
    assert doubled[9_999]["n"] == 19_998


PARENT_PID = os.getpid()


def die_in_a_worker(batch: dict) -> dict:
    if os.getpid() != PARENT_PID:
        os._exit(1)
    return batch


@pytest.mark.slow
def test_map_site_explains_a_dead_worker(real_pool_host):
    real_pool_host(cpu_count=64)
    dataset = datasets.Dataset.from_dict({"value": list(range(64))})
    with pytest.raises(RuntimeError, match=f"{HATCH}=0") as raised:
        map_site.run_map(dataset, die_in_a_worker, num_proc=2, desc="dying", batched=True, load_from_cache_file=False)
    assert "2 worker process(es)" in str(raised.value)


# without `unsloth` and without the zoo ----------------------------------------------------------

PROBE_PREAMBLE = textwrap.dedent(
    """
    import json, logging, sys, tempfile
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, format="WARNING %(name)s %(message)s")
    sys.path[:0] = [{unsloth_dir!r}, {repo!r}]

    class Block:
        def __init__(self, names): self.names = names
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {{fullname!r}} (blocked)")
            return None

    sys.meta_path.insert(0, Block({blocked!r}))
    from tools.kits.fake_host import HostProfile, Patcher, apply_host
    import unsloth_num_proc, unsloth_studio

    def answer(profile, desired=None, serial_as_none=True, gpus=None):
        patcher = Patcher()
        policy = unsloth_num_proc.load_policy()
        apply_host(patcher, profile, Path(tempfile.mkdtemp()), [policy] if policy else [])
        if gpus is not None:
            patcher.setitem(__import__("os").environ, "CUDA_VISIBLE_DEVICES", gpus)
        try:
            return unsloth_studio.dataset_map_num_proc(desired, serial_as_none=serial_as_none)
        finally:
            patcher.undo()
    """
)


def run_probe(blocked: list, body: str) -> tuple:
    code = PROBE_PREAMBLE.format(unsloth_dir=str(REPO / "unsloth"), repo=str(REPO), blocked=blocked) + textwrap.dedent(
        body
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.mark.slow
def test_studio_without_unsloth_or_the_zoo_is_served_by_the_off_disk_copy():
    seen, _ = run_probe(
        ["unsloth_zoo"],
        """
        print(json.dumps({
            "affinity_six": answer(HostProfile(cpu_count=64, affinity=6)),
            "config_serial": answer(HostProfile(cpu_count=64), 1, serial_as_none=False),
            "two_gpus": answer(HostProfile(cpu_count=64), gpus="0,1"),
            "policy": unsloth_num_proc.load_policy().__name__,
            "unsloth_imported": "unsloth" in sys.modules,
            "zoo_imported": any(name.startswith("unsloth_zoo") for name in sys.modules),
        }))
        """,
    )
    assert seen["policy"] == "_unsloth_dataset_num_proc_fallback"
    assert seen["unsloth_imported"] is False and seen["zoo_imported"] is False
    assert seen["affinity_six"] == 3  # the policy's half of 6; Studio's safe third would be 2
    assert seen["config_serial"] == 1
    assert seen["two_gpus"] == 4


@pytest.mark.slow
def test_without_any_policy_studio_falls_back_to_safe_num_proc_per_layer():
    seen, stderr = run_probe(
        ["unsloth_zoo", "unsloth"],
        """
        print(json.dumps({
            "auto": answer(HostProfile(cpu_count=12)),
            "affinity_six": answer(HostProfile(cpu_count=64, affinity=6)),
            "map_serial": answer(HostProfile(cpu_count=12), 1),
            "config_serial": answer(HostProfile(cpu_count=12), 1, serial_as_none=False),
            "config_tiny_host": answer(HostProfile(cpu_count=2), serial_as_none=False),
            "macos_config": answer(HostProfile(platform="darwin", cpu_count=64), 1, serial_as_none=False),
            "two_gpus": answer(HostProfile(cpu_count=64), gpus="0,1"),
            "policy": unsloth_num_proc.load_policy(),
        }))
        """,
    )
    assert seen["policy"] is None
    assert seen["auto"] == 4  # 12 // 3
    assert seen["affinity_six"] == 2  # 6 // 3
    assert seen["map_serial"] is None
    assert seen["config_serial"] == 1
    assert seen["config_tiny_host"] == 1  # 2 // 3 = 0, raised to 1 (in-process)
    assert seen["macos_config"] is None
    assert seen["two_gpus"] == 4
    assert len([line for line in stderr.splitlines() if line.startswith("WARNING")]) == 1
