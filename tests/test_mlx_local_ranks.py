"""The worker-count policy counts `mlx.launch` ranks that share a host, read from the ring backend's hostfile."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.kits.fake_host import HostProfile, apply_host
from unsloth_zoo import dataset_num_proc as policy

# What `mlx.launch -n 3 --backend ring` writes on one host, and a two-Mac hostfile with two ranks per Mac.
ONE_HOST_THREE_RANKS = [["127.0.0.1:5000"], ["127.0.0.1:5001"], ["127.0.0.1:5002"]]
TWO_MACS = [
    ["192.168.1.10:5000", "192.168.1.10:5001"],
    ["192.168.1.10:5002"],
    ["192.168.1.11:5003"],
    ["192.168.1.11:5004"],
]


@pytest.fixture
def mlx_host(monkeypatch, tmp_path):
    def apply(entries, rank, **fields):
        hostfile = tmp_path / "hostfile.json"
        hostfile.write_text(entries if isinstance(entries, str) else json.dumps(entries), encoding="utf-8")
        env = {policy.MLX_HOSTFILE_ENV_VAR: str(hostfile), policy.MLX_RANK_ENV_VAR: str(rank), **fields.pop("env", {})}
        apply_host(monkeypatch, HostProfile(env=env, **fields), tmp_path / "host", [policy])

    return apply


def test_parse_hostfile_keeps_each_ranks_addresses_without_ports():
    hosts = policy.parse_mlx_hostfile(json.dumps(TWO_MACS))
    assert hosts[0] == frozenset({"192.168.1.10"}) and hosts[3] == frozenset({"192.168.1.11"})
    assert policy.parse_mlx_hostfile("\n") == []


@pytest.mark.parametrize("text", ['{"a": 1}', "[[]]", '[["no-port"]]', "[1, 2]"])
def test_parse_hostfile_refuses_other_shapes(text):
    with pytest.raises(ValueError, match="ip:port"):
        policy.parse_mlx_hostfile(text)


@pytest.mark.parametrize("rank, expected", [(0, (2, 0)), (1, (2, 1)), (2, (2, 0)), (3, (2, 1))])
def test_ranks_on_a_host_are_those_sharing_its_addresses(rank, expected):
    assert policy.count_ranks_sharing_host(policy.parse_mlx_hostfile(json.dumps(TWO_MACS)), rank) == expected


def test_one_host_ranks_share_cpus(mlx_host):
    mlx_host(ONE_HOST_THREE_RANKS, 1, cpu_count=48, available_memory_gb=512)
    decision = policy.explain_dataset_num_proc()
    assert decision.host.local_ranks == 3 and decision.host.local_ranks_source.startswith("MLX_HOSTFILE")
    assert decision.value == 8  # 48 CPUs / 3 ranks = 16 each -> 8 workers, as LOCAL_WORLD_SIZE=3 gives
    mlx_host(ONE_HOST_THREE_RANKS, 1, cpu_count=48, available_memory_gb=512, env={"LOCAL_WORLD_SIZE": "3"})
    assert policy.explain_dataset_num_proc().value == 8


def test_two_macs_count_only_this_macs_ranks(mlx_host):
    mlx_host(TWO_MACS, 2, cpu_count=16, available_memory_gb=512)
    assert policy.explain_dataset_num_proc().host.local_ranks == 2


def test_an_explicit_local_size_wins_over_the_hostfile(mlx_host):
    mlx_host(ONE_HOST_THREE_RANKS, 0, cpu_count=16, env={"LOCAL_WORLD_SIZE": "1"})
    assert policy.explain_dataset_num_proc().host.local_ranks == 1


@pytest.mark.parametrize(
    "entries, rank", [("", 0), ("not json", 0), (ONE_HOST_THREE_RANKS, 7), (ONE_HOST_THREE_RANKS, "x")]
)
def test_single_rank_or_unreadable_hostfile_counts_one_rank(mlx_host, entries, rank):
    mlx_host(entries, rank, cpu_count=16)
    assert policy.explain_dataset_num_proc().host.local_ranks == 1


hostfile_text = st.one_of(
    st.text(max_size=60),
    st.just("[" * 5000),
    st.lists(st.lists(st.one_of(st.text(max_size=12), st.integers(), st.none()), max_size=3).map(list), max_size=4).map(
        json.dumps
    ),
    st.lists(
        st.lists(st.sampled_from(["127.0.0.1:1", "10.0.0.2:7", "[::1]:9"]), min_size=1, max_size=2), max_size=5
    ).map(json.dumps),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostfile_text, rank=st.one_of(st.text(max_size=6), st.integers(-3, 8).map(str)))
def test_any_hostfile_gives_a_sane_count_and_never_raises(tmp_path, text, rank):
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(text, encoding="utf-8")
    count, index = policy.mlx_ranks_on_this_host(str(hostfile), rank)
    assert count >= 1 and 0 <= index < count
