"""Benchmark the policy's worker count against every alternative, side by side in one run.

Each (workload, num_proc) is measured `--repeats` times in a fresh process (tools/bench_run.py),
interleaved so machine drift hits all alike, with datasets' caches off so every run really maps.
Prints a markdown table and writes bench-out/bench.json and bench-out/bench.png. Where in-process and the
fastest pool tie (each median inside the other's spread), the summary asks that the policy stayed in-process.

"As a user calls it": each workload also goes through the zoo's `sft_prepare_dataset` and the real
`trl.SFTTrainer` dataset preparation with unsloth's default SFT config, against the same path run with each
explicit count (in-process, then the sweep); its efficiency is that path's oracle over its default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

from tools.bench_run import AUTO, DIRECT_BATCHED, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
MIB = 2**20
GIB = 2**30


def old_heuristic() -> int:
    return min(max((os.cpu_count() or 1) + 4, 2), 64)


def mapped_closure(workload):
    """The workload's mapped closure, which the zoo's map sites hand the policy to weigh."""
    from tools.kits import tokenizer_kit
    from tools.bench_run import direct_closure

    tokenizer = tokenizer_kit.build_heavy_tokenizer() if workload.heavy_tokenizer else tokenizer_kit.build_tokenizer()
    return direct_closure(workload, tokenizer)


def candidates_for(workload, policy, usable_cpus: int) -> dict:
    """Label -> num_proc for one workload; the sweep doubles from 2 up to twice the usable CPUs."""
    candidates = {
        "in-process (None)": None,
        "num_proc=1": 1,
        "policy": policy.get_dataset_num_proc(
            rows=workload.rows, closure=mapped_closure(workload), batched=DIRECT_BATCHED
        ),
        "old heuristic": old_heuristic(),
    }
    count = 2
    while count <= max(2 * usable_cpus, 2):
        candidates[f"sweep {count}"] = count
        count *= 2
    return candidates


USER_PATHS = ("zoo", "trl")
# A user path's explicit in-process request (0 = in-process in every config encoding).
IN_PROCESS_REQUEST = 0


def user_requests(usable_cpus: int) -> list:
    """What each user path runs: the default config, explicit in-process, then the direct sweep's counts."""
    requests = [AUTO, IN_PROCESS_REQUEST]
    count = 2
    while count <= max(2 * usable_cpus, 2):
        requests.append(count)
        count *= 2
    return requests


def available_user_paths(requested: Sequence[str]) -> list:
    """The user paths asked for whose packages are installed here (trl needs trl, transformers and torch)."""
    import importlib.util

    return [path for path in requested if path != "trl" or importlib.util.find_spec("trl") is not None]


def _run_once(workload: str, num_proc, count_pickled: bool, path: str = "direct") -> dict:
    argv = [
        sys.executable,
        "-m",
        "tools.bench_run",
        workload,
        "none" if num_proc is None else str(num_proc),
        "--path",
        path,
    ]
    if count_pickled:
        argv.append("--count-pickled")
    env = {key: value for key, value in os.environ.items() if key != "UNSLOTH_DATASET_NUM_PROC"}
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_all(plan: dict, repeats: int, log: TextIO) -> dict:
    """plan: workload -> sorted distinct num_proc values. Returns (workload, num_proc) -> list of runs."""
    runs = {(name, value): [] for name, values in plan.items() for value in values}
    for repeat in range(repeats):
        for name, values in plan.items():
            # Rotate the order each repeat so no count always runs first (cold) or last.
            shift = repeat % len(values)
            for value in values[shift:] + values[:shift]:
                run = _run_once(name, value, count_pickled=False)
                runs[(name, value)].append(run)
                log.write(f"  repeat {repeat + 1}/{repeats} workload {name} num_proc={value}: {run['wall_s']:.2f} s\n")
                log.flush()
    for name, values in plan.items():
        for value in values:
            pickled = _run_once(name, value, count_pickled=True)
            for run in runs[(name, value)]:
                run["bytes_pickled_to_workers"] = pickled["bytes_pickled_to_workers"]
    return runs


def measure_user_paths(names: Sequence[str], paths: Sequence[str], requests: list, repeats: int, log: TextIO) -> dict:
    """(workload, path, request) -> list of runs, interleaved like `measure_all`."""
    runs = {(name, path, request): [] for name in names for path in paths for request in requests}
    for repeat in range(repeats):
        for name in names:
            for path in paths:
                shift = repeat % len(requests)
                for request in requests[shift:] + requests[:shift]:
                    run = _run_once(name, request, count_pickled=False, path=path)
                    runs[(name, path, request)].append(run)
                    log.write(
                        f"  repeat {repeat + 1}/{repeats} workload {name} {path} request={request}: {run['wall_s']:.2f} s\n"
                    )
                    log.flush()
    return runs


def summarise_user_paths(user_runs: dict) -> dict:
    """workload -> path -> the default config's wall and pools, the path's oracle, and the efficiency."""
    summary: dict = {}
    for (name, path, request), runs in user_runs.items():
        entry = summary.setdefault(name, {}).setdefault(path, {"requests": {}})
        entry["requests"][str(request)] = {
            "wall_s": statistics.median(run["wall_s"] for run in runs),
            "peak_tree_rss_bytes": statistics.median(run["peak_tree_rss_bytes"] for run in runs),
            "pools": runs[0]["pools"],
        }
    for paths in summary.values():
        for entry in paths.values():
            oracle = min(entry["requests"], key=lambda request: entry["requests"][request]["wall_s"])
            default = entry["requests"][AUTO]
            entry["oracle_request"] = oracle
            entry["default_pools"] = default["pools"]
            entry["efficiency"] = entry["requests"][oracle]["wall_s"] / default["wall_s"]
    return summary


def within_noise(walls: Sequence[float], other_walls: Sequence[float]) -> bool:
    """Two counts tie when each one's median falls inside the other's spread (min to max) over the repeats."""
    median, other_median = statistics.median(walls), statistics.median(other_walls)
    return min(other_walls) <= median <= max(other_walls) and min(walls) <= other_median <= max(walls)


def summarise(plan_labels: dict, runs: dict) -> dict:
    summary = {}
    for name, labels in plan_labels.items():
        medians = {
            value: {
                "wall_s": statistics.median(run["wall_s"] for run in runs[(name, value)]),
                "peak_tree_rss_bytes": statistics.median(run["peak_tree_rss_bytes"] for run in runs[(name, value)]),
                "closure_pickle_bytes": runs[(name, value)][0]["closure_pickle_bytes"],
                "bytes_pickled_to_workers": runs[(name, value)][0]["bytes_pickled_to_workers"],
                "walls_s": [run["wall_s"] for run in runs[(name, value)]],
            }
            for value in set(labels.values())
        }
        oracle_value = min(medians, key=lambda value: medians[value]["wall_s"])
        policy_value = labels["policy"]
        policy_workers = policy_value or 1
        # A pool that only ties with in-process costs its memory for nothing: the policy should stay in-process.
        best_pool = min((value for value in medians if value and value > 1), key=lambda value: medians[value]["wall_s"])
        tie = within_noise(medians[None]["walls_s"], medians[best_pool]["walls_s"])
        summary[name] = {
            "description": WORKLOADS[name].description,
            "candidates": {label: {"num_proc": value, **medians[value]} for label, value in labels.items()},
            "oracle_num_proc": oracle_value,
            "policy_num_proc": policy_value,
            "policy_efficiency": medians[oracle_value]["wall_s"] / medians[policy_value]["wall_s"],
            "num_proc_1_vs_none": medians[1]["wall_s"] / medians[None]["wall_s"],
            "policy_memory_budget_bytes": policy_workers * GIB,
            "policy_peak_within_budget": medians[policy_value]["peak_tree_rss_bytes"] <= policy_workers * GIB,
            "best_pool": best_pool,
            "in_process_within_noise": tie,
            "prefers_in_process": (policy_value is None) if tie else None,
        }
    return summary


def machine_description() -> dict:
    import datasets
    import psutil

    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "python": platform.python_version(),
        "datasets": datasets.__version__,
        "platform": platform.platform(terse=True),
    }


def format_table(summary: dict, machine: dict, repeats: int) -> str:
    lines = [
        f"Machine: {machine['cpus']} CPUs, {machine['memory_gib']} GiB, Python {machine['python']}, "
        f"datasets {machine['datasets']}, {machine['platform']}. Median of {repeats} runs each.",
        "",
        "| workload | candidate | num_proc | wall s (min to max) | peak tree RSS MiB | closure KiB "
        "| pickled to workers MiB | oracle / this |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, result in summary.items():
        oracle = result["candidates"]
        best = min(candidate["wall_s"] for candidate in oracle.values())
        for label, candidate in result["candidates"].items():
            marker = (
                " **(oracle)**"
                if candidate["num_proc"] == result["oracle_num_proc"]
                and label.startswith(("sweep", "in-process", "num_proc"))
                else ""
            )
            pickled = candidate["bytes_pickled_to_workers"]
            lines.append(
                f"| {name}: {result['description']} | {label}{marker} | {candidate['num_proc']} | {_wall_text(candidate)} "
                f"| {candidate['peak_tree_rss_bytes'] / MIB:,.0f} | {candidate['closure_pickle_bytes'] / 1024:,.0f} "
                f"| {'-' if pickled is None else f'{pickled / MIB:,.1f}'} | {best / candidate['wall_s']:.2f} |"
            )
    lines += [
        "",
        "| workload | policy num_proc | oracle num_proc | policy efficiency (target >= 0.90) | num_proc=1 vs None "
        "| policy peak vs budget | in-process vs the best pool (a tie should stay in-process) |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for name, result in summary.items():
        policy = result["candidates"]["policy"]
        lines.append(
            f"| {name} | {result['policy_num_proc']} | {result['oracle_num_proc']} | {result['policy_efficiency']:.2f} "
            f"({'met' if result['policy_efficiency'] >= 0.9 else 'missed'}) | {result['num_proc_1_vs_none']:.2f}x slower "
            f"| {policy['peak_tree_rss_bytes'] / MIB:,.0f} MiB of {result['policy_memory_budget_bytes'] / MIB:,.0f} MiB "
            f"({'met' if result['policy_peak_within_budget'] else 'missed'}) | {_tie_text(result)} |"
        )
    return "\n".join(lines)


def _wall_text(candidate: dict) -> str:
    walls = candidate["walls_s"]
    spread = f" ({min(walls):.2f} to {max(walls):.2f})" if len(walls) > 1 else ""
    return f"{candidate['wall_s']:.2f}{spread}"


def _tie_text(result: dict) -> str:
    """In-process against the fastest pool, each with its median wall and peak memory, and whether they tie."""
    alone = result["candidates"]["in-process (None)"]
    pool = next(c for c in result["candidates"].values() if c["num_proc"] == result["best_pool"])
    text = (
        f"{'within noise' if result['in_process_within_noise'] else 'apart'}: "
        f"{alone['wall_s']:.2f} s ({alone['peak_tree_rss_bytes'] / MIB:,.0f} MiB) vs "
        f"{pool['wall_s']:.2f} s ({pool['peak_tree_rss_bytes'] / MIB:,.0f} MiB)"
    )
    if result["prefers_in_process"] is None:
        return text
    return f"{text}; policy {result['policy_num_proc']} ({'met' if result['prefers_in_process'] else 'missed'})"


def _pools_text(pools: list) -> str:
    return "in-process" if not pools else "pools " + ",".join(str(size) for size in pools)


def format_user_table(summary: dict, user: dict) -> str:
    """Per workload: the direct call's policy efficiency next to each user path's, with what each default built."""
    paths = sorted({path for entry in user.values() for path in entry})
    header = ["workload", "direct call: policy efficiency"] + [
        f"as a user calls it: {path} (default config)" for path in paths
    ]
    lines = ["| " + " | ".join(header) + " |", "| --- | ---: |" + " ---: |" * len(paths)]
    for name, entry in user.items():
        cells = [name, f"{summary[name]['policy_efficiency']:.2f}" if name in summary else "-"]
        for path in paths:
            result = entry.get(path)
            if result is None:
                cells.append("-")
                continue
            met = "met" if result["efficiency"] >= 0.9 else "missed"
            cells.append(
                f"{result['efficiency']:.2f} ({met}; {_pools_text(result['default_pools'])}; oracle {result['oracle_request']})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        return f"no plot: {error}"
    figure, (wall_axes, memory_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, result in summary.items():
        points = sorted(
            {(c["num_proc"] or 0, c["wall_s"], c["peak_tree_rss_bytes"]) for c in result["candidates"].values()}
        )
        xs = [point[0] for point in points]
        line = wall_axes.plot(xs, [point[1] for point in points], marker="o", label=f"{name}: {result['description']}")[
            0
        ]
        memory_axes.plot(xs, [point[2] / MIB for point in points], marker="o", color=line.get_color())
        pick = result["candidates"]["policy"]
        wall_axes.plot([pick["num_proc"] or 0], [pick["wall_s"]], marker="*", markersize=16, color=line.get_color())
        memory_axes.plot(
            [pick["num_proc"] or 0],
            [pick["peak_tree_rss_bytes"] / MIB],
            marker="*",
            markersize=16,
            color=line.get_color(),
        )
    for axes, label in ((wall_axes, "wall time (s)"), (memory_axes, "peak tree RSS (MiB)")):
        axes.set_xlabel("num_proc (0 = in-process); star = the policy's pick")
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
    wall_axes.set_yscale("log")
    wall_axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return None


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench --", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workloads", default="a,b,c,d,e,f", help="comma-separated, from: " + ", ".join(sorted(WORKLOADS))
    )
    parser.add_argument("--user-paths", default="zoo,trl", help="user paths to measure: zoo, trl (empty for none)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    args = parser.parse_args(argv)
    out = stdout if stdout is not None else sys.stdout
    names = [name.strip() for name in args.workloads.split(",") if name.strip()]
    user_paths = [path.strip() for path in args.user_paths.split(",") if path.strip()]
    unknown = [name for name in names if name not in WORKLOADS] + [
        path for path in user_paths if path not in USER_PATHS
    ]
    if unknown or args.repeats < 1:
        out.write(f"bench: unknown workloads {unknown} or repeats < 1\n")
        return 2

    from unsloth_num_proc import load_policy

    policy = load_policy()
    usable_cpus = policy.explain_dataset_num_proc().host.usable_cpus or 1
    labels = {name: candidates_for(WORKLOADS[name], policy, usable_cpus) for name in names}
    plan = {
        name: sorted(set(values.values()), key=lambda value: -1 if value is None else value)
        for name, values in labels.items()
    }
    out.write(f"bench: {sum(len(v) for v in plan.values())} (workload, num_proc) pairs x {args.repeats} repeats\n")
    runs = measure_all(plan, args.repeats, out)
    summary = summarise(labels, runs)
    measured_paths = available_user_paths(user_paths)
    if measured_paths != user_paths:
        out.write(f"bench: trl is not installed, so the trl path is left out (measuring {measured_paths})\n")
    user_runs = measure_user_paths(names, measured_paths, user_requests(usable_cpus), args.repeats, out)
    user = summarise_user_paths(user_runs)
    machine = machine_description()

    args.out.mkdir(parents=True, exist_ok=True)
    table = format_table(summary, machine, args.repeats)
    if user:
        table += "\n\n" + format_user_table(summary, user)
    (args.out / "bench.md").write_text(table + "\n")
    (args.out / "bench.json").write_text(
        json.dumps(
            {
                "machine": machine,
                "repeats": args.repeats,
                "summary": summary,
                "as_a_user_calls_it": user,
                "runs": [r for rs in runs.values() for r in rs] + [r for rs in user_runs.values() for r in rs],
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    problem = plot(summary, args.out / "bench.png")
    out.write("\n" + table + "\n\n")
    out.write(
        f"wrote {args.out / 'bench.json'}, {args.out / 'bench.md'}"
        + (f"; {problem}" if problem else f", {args.out / 'bench.png'}")
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
