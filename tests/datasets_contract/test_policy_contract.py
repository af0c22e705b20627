"""What the policy returns at a map site never builds a Pool(1), on whichever datasets release is installed.

The values come from the real policy on this machine and on faked hosts; each is then used for a real map.
"""

from __future__ import annotations

import itertools
import types

import pytest

from tools.kits.fake_host import CgroupSpec, HostProfile, Patcher, apply_host
from tools.kits.pool_spy import spy_pools
from unsloth_zoo import dataset_num_proc as policy
from unsloth_zoo.dataset_utils import sft_prepare_dataset

FAKED_HOSTS = {
    "one-cpu": HostProfile(cpu_count=1),
    "192-cores": HostProfile(cpu_count=192, available_memory_gb=512),
    "2gb-pod": HostProfile(cpu_count=16, cgroup=CgroupSpec(cpu_quota=4, memory_limit_gb=2)),
    "3gb-pod": HostProfile(cpu_count=16, cgroup=CgroupSpec(memory_limit_gb=6.5, memory_usage_gb=1)),
    "macos": HostProfile(platform="darwin", cpu_count=10),
    "spawn": HostProfile(start_method="spawn", cpu_count=32),
    "eight-ranks": HostProfile(cpu_count=64, available_memory_gb=64, env={"LOCAL_WORLD_SIZE": "8"}),
    "hatch-serial": HostProfile(cpu_count=64, env={"UNSLOTH_DATASET_NUM_PROC": "1"}),
}
REQUESTS = [None, 0, 1, 2, 3, 8]


def _answers_on(profile: HostProfile, tmp_path, rows: int) -> set:
    patch = Patcher()
    try:
        apply_host(patch, profile, tmp_path, [policy])
        return {policy.get_dataset_num_proc(request, rows=rows) for request in REQUESTS} | {
            policy.get_dataset_num_proc(request) for request in REQUESTS
        }
    finally:
        patch.undo()


def _pools_built(corpus, tokenize, num_proc) -> list:
    with spy_pools() as log:
        corpus.map(tokenize, batched=True, batch_size=20, num_proc=num_proc)
    return log.process_pools()


def test_policy_answers_on_this_machine_never_build_a_pool_of_one(corpus, tokenize, monkeypatch):
    monkeypatch.delenv(policy.NUM_PROC_ENV_VAR, raising=False)
    answers = {policy.get_dataset_num_proc(request, rows=len(corpus)) for request in REQUESTS}
    answers |= {policy.get_dataset_num_proc(request) for request in REQUESTS}
    assert 1 not in answers
    for num_proc in sorted(answers, key=lambda value: value or 0):
        pools = _pools_built(corpus, tokenize, num_proc)
        assert 1 not in pools, f"num_proc={num_proc!r} built {pools}"
        assert pools == ([] if num_proc is None else [min(num_proc, len(corpus))])


@pytest.mark.parametrize("name", sorted(FAKED_HOSTS))
def test_policy_answers_on_faked_hosts_never_build_a_pool_of_one(name, corpus, tokenize, tmp_path):
    answers = _answers_on(FAKED_HOSTS[name], tmp_path / name, rows=len(corpus))
    assert 1 not in answers
    # The maps run on this real machine with the faked host's answers.
    for num_proc in sorted(answers, key=lambda value: value or 0):
        assert 1 not in _pools_built(corpus, tokenize, num_proc)


def test_sft_preparation_output_is_the_tokenizers_own_on_this_release(texts):
    import datasets
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(
        models.WordLevel(
            vocab={word: i for i, word in enumerate(sorted(set(" ".join(texts).split())))}, unk_token="the"
        )
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    expected = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    dataset = datasets.Dataset.from_dict({"text": texts})
    for dataset_num_proc in (None, 1, 2):
        args = types.SimpleNamespace(dataset_num_proc=dataset_num_proc, dataset_text_field="text", max_seq_length=64)
        prepared = sft_prepare_dataset(dataset, tokenizer, args)
        assert prepared["input_ids"] == expected
        assert prepared["attention_mask"] == [[1] * len(ids) for ids in expected]


def test_zero_never_comes_from_the_policy(monkeypatch):
    monkeypatch.delenv(policy.NUM_PROC_ENV_VAR, raising=False)
    answers = {
        policy.get_dataset_num_proc(request, serial_as_none=layer, rows=rows)
        for request, layer, rows in itertools.product(REQUESTS + [-1, 64], (True, False), (None, 0, 1, 10_000))
    }
    assert 0 not in answers and all(value is None or value >= 1 for value in answers)
