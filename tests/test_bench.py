"""The benchmark's bookkeeping on hand-made runs (no timing here: figures live in `nox -s bench`)."""

from __future__ import annotations

import io

from tools import bench


def _run(wall: float, rss_mib: int, num_proc) -> dict:
    return {
        "wall_s": wall,
        "peak_tree_rss_bytes": rss_mib * 2**20,
        "closure_pickle_bytes": 2048,
        "bytes_pickled_to_workers": 0,
        "num_proc": num_proc,
    }


def test_summary_finds_the_oracle_and_scores_the_policy():
    labels = {
        "d": {"in-process (None)": None, "num_proc=1": 1, "policy": 2, "old heuristic": 6, "sweep 2": 2, "sweep 4": 4}
    }
    runs = {
        ("d", None): [_run(3.0, 200, None), _run(2.0, 200, None), _run(2.5, 200, None)],  # median 2.5
        ("d", 1): [_run(4.0, 400, 1)] * 3,
        ("d", 2): [_run(2.0, 600, 2), _run(1.0, 600, 2), _run(9.0, 600, 2)],  # median 2.0: the oracle
        ("d", 4): [_run(2.2, 900, 4)] * 3,
        ("d", 6): [_run(5.0, 1500, 6)] * 3,
    }
    summary = bench.summarise(labels, runs)["d"]
    assert summary["oracle_num_proc"] == 2
    assert summary["policy_efficiency"] == 1.0
    assert summary["num_proc_1_vs_none"] == 4.0 / 2.5
    assert summary["policy_memory_budget_bytes"] == 2 * 2**30 and summary["policy_peak_within_budget"]
    table = bench.format_table(
        {"d": summary}, {"cpus": 2, "memory_gib": 24, "python": "3.11", "datasets": "5.2.0", "platform": "x"}, 3
    )
    assert "| d | 2 | 2 | 1.00 (met) | 1.60x slower | 600 MiB of 2,048 MiB (met) |" in table


def _labels(policy_value) -> dict:
    return {"f": {"in-process (None)": None, "num_proc=1": 1, "policy": policy_value, "sweep 2": 2, "sweep 4": 4}}


def _runs(in_process: list, two: list) -> dict:
    return {
        ("f", None): [_run(wall, 280, None) for wall in in_process],
        ("f", 1): [_run(4.0, 680, 1)] * 3,
        ("f", 2): [_run(wall, 880, 2) for wall in two],
        ("f", 4): [_run(2.9, 1270, 4)] * 3,
    }


def test_a_pool_within_noise_of_in_process_should_leave_the_map_in_process():
    # Medians 2.5 and 2.4, each inside the other's spread: a tie, which in-process wins on memory.
    tied = _runs(in_process=[2.2, 2.5, 2.8], two=[2.1, 2.4, 3.2])
    in_process = bench.summarise(_labels(None), tied)["f"]
    assert in_process["best_pool"] == 2 and in_process["in_process_within_noise"]
    assert in_process["prefers_in_process"] is True
    pooled = bench.summarise(_labels(2), tied)["f"]
    assert pooled["prefers_in_process"] is False
    machine = {"cpus": 2, "memory_gib": 24, "python": "3.11", "datasets": "5.2.0", "platform": "x"}
    assert "| within noise: 2.50 s (280 MiB) vs 2.40 s (880 MiB); policy None (met) |" in bench.format_table(
        {"f": in_process}, machine, 3
    )
    assert "policy 2 (missed) |" in bench.format_table({"f": pooled}, machine, 3)
    assert (
        "| f: 20,000 chat rows, small tokenizer (the demo) | in-process (None) | None | 2.50 (2.20 to 2.80) | 280 |"
        in (bench.format_table({"f": in_process}, machine, 3))
    )


def test_a_pool_clearly_faster_than_in_process_is_not_noise():
    apart = bench.summarise(_labels(2), _runs(in_process=[3.0, 3.1, 3.2], two=[2.0, 2.1, 2.2]))["f"]
    assert not apart["in_process_within_noise"] and apart["prefers_in_process"] is None
    table = bench.format_table(
        {"f": apart}, {"cpus": 2, "memory_gib": 24, "python": "3.11", "datasets": "5.2.0", "platform": "x"}, 3
    )
    assert "| apart: 3.10 s (280 MiB) vs 2.10 s (880 MiB) |" in table
    # One sided: the pool's median sits inside in-process's spread, but not the other way round.
    one_sided = bench.summarise(_labels(2), _runs(in_process=[2.0, 3.0, 4.0], two=[2.4, 2.5, 2.6]))["f"]
    assert not one_sided["in_process_within_noise"]


def test_sweep_doubles_up_to_twice_the_usable_cpus():
    asked = []

    class Policy:
        @staticmethod
        def get_dataset_num_proc(rows=None, closure=None, batched=None):
            asked.append((rows, batched))
            return None

    candidates = bench.candidates_for(bench.WORKLOADS["a"], Policy, usable_cpus=6)
    assert [value for label, value in candidates.items() if label.startswith("sweep")] == [2, 4, 8]
    assert candidates["in-process (None)"] is None and candidates["num_proc=1"] == 1
    assert asked == [(8_000, True)]  # the policy is asked about the batched map the direct path runs


def test_unknown_workload_is_a_usage_error():
    out = io.StringIO()
    assert bench.main(["--workloads", "zz"], stdout=out) == 2
    assert "zz" in out.getvalue()


def _user_run(wall: float, pools: list) -> dict:
    return {"wall_s": wall, "peak_tree_rss_bytes": 100 * 2**20, "pools": pools}


def test_a_user_path_is_scored_against_its_own_oracle():
    user_runs = {
        ("e", "trl", "auto"): [_user_run(1.2, [])] * 3,
        ("e", "trl", 0): [_user_run(1.0, []), _user_run(1.1, []), _user_run(0.9, [])],  # median 1.0: the oracle
        ("e", "trl", 2): [_user_run(4.0, [2, 2])] * 3,
        ("e", "zoo", "auto"): [_user_run(0.5, [])] * 3,
        ("e", "zoo", 0): [_user_run(0.5, [])] * 3,
        ("e", "zoo", 2): [_user_run(2.0, [2])] * 3,
    }
    user = bench.summarise_user_paths(user_runs)
    assert user["e"]["trl"]["oracle_request"] == "0" and abs(user["e"]["trl"]["efficiency"] - 1.0 / 1.2) < 1e-9
    assert user["e"]["zoo"]["efficiency"] == 1.0 and user["e"]["zoo"]["default_pools"] == []
    direct = {"e": {"policy_efficiency": 0.97}}
    table = bench.format_user_table(direct, user)
    assert "| e | 0.97 | 0.83 (missed; in-process; oracle 0) | 1.00 (met; in-process; oracle auto) |" in table
    assert "as a user calls it: trl (default config)" in table


def test_user_paths_run_the_default_then_in_process_then_the_sweep():
    assert bench.user_requests(usable_cpus=2) == ["auto", 0, 2, 4]
    assert bench.available_user_paths(["zoo"]) == ["zoo"]
