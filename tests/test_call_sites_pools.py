"""Real worker pools behind every map site of the zoo and of unsloth, seen through a spy on `Pool.__init__`.

On this host (it forks and has memory for two workers): no site ever builds a Pool(1), a serial
request builds no pool, an explicit 2 builds a pool of 2, and UNSLOTH_DATASET_NUM_PROC=0 builds none.
"""

from __future__ import annotations

import types

import pytest

import unsloth_num_proc
from tools.kits.fake_host import POLICY_ENV_VARS
from tools.kits.pool_spy import spy_pools
from tools.kits.sft_data import build_preference_rows, build_sft_rows, build_stepwise_rows, build_unpaired_rows
from unsloth import chat_templates
from unsloth.trainers import DATASET_NUM_PROC_LAYER, make_config, prepare_dataset
from unsloth_zoo import dataset_utils

pytestmark = pytest.mark.slow

ROWS = 300
FAMILY_ROWS = {
    "sft": lambda n: [{"text": row["text"]} for row in build_sft_rows(n)],
    "dpo": build_preference_rows,
    "cpo": build_preference_rows,
    "orpo": build_preference_rows,
    "reward": build_preference_rows,
    "kto": build_unpaired_rows,
    "prm": build_stepwise_rows,
}
CALL_SITES = ["zoo.sft_prepare_dataset", "zoo.train_on_responses_only", "unsloth.train_on_responses_only"] + [
    f"family.{family}" for family in sorted(DATASET_NUM_PROC_LAYER)
]


@pytest.fixture(scope="module", autouse=True)
def _maps_really_run(maps_really_run):
    yield


@pytest.fixture(autouse=True)
def real_host(monkeypatch):
    for name in POLICY_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    policy = unsloth_num_proc.load_policy()
    if policy.get_dataset_num_proc(2, rows=ROWS) != 2:
        pytest.skip("this host does not give a map two forked workers, so pools cannot be checked here")
    return policy


def test_every_family_has_a_call_site():
    assert set(FAMILY_ROWS) == set(DATASET_NUM_PROC_LAYER)


def tokenized_trainer(tokenizer, n_rows: int):
    import datasets

    texts = [row["text"] for row in build_sft_rows(n_rows)]
    train = datasets.Dataset.from_dict({"input_ids": [encoding.ids for encoding in tokenizer.encode_batch(texts)]})
    return types.SimpleNamespace(train_dataset=train, eval_dataset=None, processing_class=tokenizer)


def run_call_site(site: str, request, tokenizer, n_rows: int = ROWS):
    """Map `n_rows` rows through `site` with `request` as its num_proc (in a config where the site reads one)."""
    import datasets

    if site == "zoo.sft_prepare_dataset":
        args = types.SimpleNamespace(dataset_num_proc=request, dataset_text_field="text", max_seq_length=256)
        return dataset_utils.sft_prepare_dataset(
            datasets.Dataset.from_list(FAMILY_ROWS["sft"](n_rows)), tokenizer, args
        )
    if site == "zoo.train_on_responses_only":
        trainer = tokenized_trainer(tokenizer, n_rows)
        return dataset_utils.train_on_responses_only(
            trainer, "<|user|>\n", "<|assistant|>\n", num_proc=request
        ).train_dataset
    if site == "unsloth.train_on_responses_only":
        return chat_templates.train_on_responses_only(
            tokenized_trainer(tokenizer, n_rows), num_proc=request
        ).train_dataset
    family = site.removeprefix("family.")
    dataset = datasets.Dataset.from_list(FAMILY_ROWS[family](n_rows))
    return prepare_dataset(family, dataset, tokenizer, make_config(family, dataset_num_proc=request))


def mapped(site: str, request, tokenizer, n_rows: int = ROWS):
    with spy_pools() as log:
        result = run_call_site(site, request, tokenizer, n_rows)
    assert len(result) == n_rows
    return result, log.process_pools()


@pytest.mark.parametrize("serial", [0, 1])
@pytest.mark.parametrize("site", CALL_SITES)
def test_a_serial_request_builds_no_pool(tokenizer, site, serial):
    _, pools = mapped(site, serial, tokenizer)
    assert pools == []


@pytest.mark.parametrize("site", CALL_SITES)
def test_an_explicit_two_builds_a_pool_of_two_with_the_serial_output(tokenizer, site):
    parallel, pools = mapped(site, 2, tokenizer)
    assert pools == [2]
    serial, _ = mapped(site, 0, tokenizer)
    assert parallel.to_list() == serial.to_list()


@pytest.mark.parametrize("site", CALL_SITES)
def test_auto_never_builds_a_pool_of_one(tokenizer, site):
    _, pools = mapped(site, None, tokenizer)
    assert all(processes >= 2 for processes in pools), pools


@pytest.mark.parametrize("hatch", ["0", "1"])
@pytest.mark.parametrize("site", CALL_SITES)
def test_the_serial_hatch_builds_no_pool_whatever_is_requested(tokenizer, site, hatch, monkeypatch):
    monkeypatch.setenv("UNSLOTH_DATASET_NUM_PROC", hatch)
    _, pools = mapped(site, 2, tokenizer)
    assert pools == []


@pytest.mark.parametrize("site", ["zoo.sft_prepare_dataset", "family.sft", "unsloth.train_on_responses_only"])
def test_serial_stays_serial_where_the_site_would_auto_size(tokenizer, real_host, site):
    # Enough rows that auto-sizing uses workers: the zoo's threshold, and two batched workers' worth of rows even after
    # the small test tokenizer's closure weight (well under a MiB) is added to each worker's share.
    rows = max(
        real_host.ZOO_MIN_ROWS_FOR_MULTIPROC,
        2 * (real_host.AUTO_MIN_ROWS_PER_BATCHED_WORKER + real_host.AUTO_ROWS_PER_CLOSURE_MIB),
    )
    _, auto_pools = mapped(site, None, tokenizer, rows)
    if not auto_pools:
        pytest.skip("auto-sizing stays in-process here, so serial and auto cannot be told apart")
    assert 1 not in auto_pools
    _, serial_pools = mapped(site, 1, tokenizer, rows)
    assert serial_pools == []


@pytest.mark.parametrize("family", sorted(DATASET_NUM_PROC_LAYER))
def test_a_config_set_to_one_after_it_was_built_still_builds_no_pool(tokenizer, family):
    import datasets

    config = make_config(family, dataset_num_proc=2)
    config.dataset_num_proc = 1
    with spy_pools() as log:
        prepare_dataset(family, datasets.Dataset.from_list(FAMILY_ROWS[family](ROWS)), tokenizer, config)
    assert log.process_pools() == []
