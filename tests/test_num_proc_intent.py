"""Auto intent: a config built with auto records it, and every map site we own asks the policy again with its rows.

Before this, each config turned auto into a count before any row was known, and the map read that count as an
explicit request: 1,000 rows got two workers on a host whose policy keeps them in-process.
"""

from __future__ import annotations

import pytest

import unsloth_num_proc
from tools.kits.fake_host import POLICY_ENV_VARS, HostProfile, apply_host
from tools.kits.pool_spy import spy_pools
from tools.kits.sft_data import build_preference_rows, build_sft_rows
from unsloth.trainers import DPODatasetConfig, SFTDatasetConfig, make_config, prepare_dataset
from unsloth_studio.training import build_sft_config
from unsloth_zoo import dataset_num_proc as zoo_policy
from unsloth_zoo.dataset_utils import sft_prepare_dataset

SMALL = 1_000
FORKING_HOST = HostProfile(platform="linux", cpu_count=8, start_method="fork", available_memory_gb=64.0)


@pytest.fixture(autouse=True)
def _this_host(monkeypatch, maps_really_run):
    for name in POLICY_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def forking_host(monkeypatch, tmp_path):
    apply_host(monkeypatch, FORKING_HOST, tmp_path, [unsloth_num_proc.load_policy()])


@pytest.fixture
def workers_for_auto():
    """Skip unless this host's auto answer, with no rows known, is a worker pool (the trap being tested)."""
    if not (unsloth_num_proc.load_policy().get_dataset_num_proc(None) or 0) >= 2:
        pytest.skip("this host runs auto in-process even without rows, so the lost intent cannot show")


def sft_dataset(n):
    import datasets

    return datasets.Dataset.from_list([{"text": row["text"]} for row in build_sft_rows(n)])


def test_the_intent_lives_in_the_policy_alone():
    # One copy, in the policy and its generated twin: neither package keeps a hand-written second one.
    assert not hasattr(unsloth_num_proc, "INTENT_ATTRIBUTE")
    assert unsloth_num_proc.load_policy().INTENT_ATTRIBUTE == zoo_policy.INTENT_ATTRIBUTE


@pytest.mark.parametrize("module", [unsloth_num_proc, zoo_policy], ids=["unsloth", "zoo"])
def test_map_request_reads_the_recorded_intent(module, forking_host):
    auto = SFTDatasetConfig()
    assert auto.dataset_num_proc == 4  # the config layer resolved auto on an 8-CPU host...
    assert module.map_request(auto) is None  # ...and the map still sees auto
    assert module.map_request(SFTDatasetConfig(dataset_num_proc=3)) == 3
    assert module.map_request(SFTDatasetConfig(dataset_num_proc=0)) == 1
    # The map encoding writes serial as None, which must not read back as auto.
    serial_dpo = DPODatasetConfig(dataset_num_proc=0)
    assert serial_dpo.dataset_num_proc is None and module.map_request(serial_dpo) == 1
    auto.dataset_num_proc = 2  # assigned after building: a fresh, explicit request
    assert module.map_request(auto) == 2


def test_a_config_without_a_record_is_read_as_written():
    class Plain:
        dataset_num_proc = None

    assert unsloth_num_proc.map_request(Plain()) is None and zoo_policy.map_request(Plain()) is None
    Plain.dataset_num_proc = 5
    assert unsloth_num_proc.map_request(Plain()) == 5 and zoo_policy.map_request(Plain()) == 5


@pytest.mark.slow
def test_zoo_sft_map_keeps_a_small_auto_dataset_in_process(tokenizer, workers_for_auto):
    config = SFTDatasetConfig()
    assert config.dataset_num_proc >= 2
    with spy_pools() as log:
        sft_prepare_dataset(sft_dataset(SMALL), tokenizer, config)
    assert log.process_pools() == []


@pytest.mark.slow
def test_family_map_keeps_a_small_auto_dataset_in_process(tokenizer, workers_for_auto):
    import datasets

    config = make_config("dpo")
    assert config.dataset_num_proc >= 2
    with spy_pools() as log:
        prepare_dataset("dpo", datasets.Dataset.from_list(build_preference_rows(SMALL)), tokenizer, config)
    assert log.process_pools() == []


@pytest.mark.slow
def test_studio_config_keeps_auto_for_the_trainers_map(tokenizer, workers_for_auto):
    config = build_sft_config()
    assert config.dataset_num_proc >= 2
    with spy_pools() as log:
        sft_prepare_dataset(sft_dataset(SMALL), tokenizer, config)
    assert log.process_pools() == []


@pytest.mark.slow
def test_an_explicit_request_stays_explicit(tokenizer):
    if unsloth_num_proc.load_policy().get_dataset_num_proc(2, rows=SMALL) != 2:
        pytest.skip("this host gives no map two forked workers")
    with spy_pools() as log:
        sft_prepare_dataset(sft_dataset(SMALL), tokenizer, SFTDatasetConfig(dataset_num_proc=2))
    assert log.process_pools() == [2]


def test_trls_names_need_trl():
    import importlib.util

    if importlib.util.find_spec("trl") is not None:
        pytest.skip("trl is installed here; nox -s trl checks the names are TRL's own")
    with pytest.raises(ImportError, match="pip install trl"):
        from unsloth.trainers import SFTConfig  # noqa: F401
