"""Issue 12's findings, one test each: loading by path, spawn hosts, the default context, never raising,
never hanging, forking while another thread warns, overlapping diagnostics. Only OS answers are faked.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tools.kits.fake_host import CgroupSpec, HostProfile, apply_host
from unsloth_zoo import dataset_num_proc as policy

REPO = Path(__file__).resolve().parent.parent
CANONICAL = REPO / "zoo" / "unsloth_zoo" / "dataset_num_proc.py"
TWIN = REPO / "unsloth" / "unsloth" / "dataset_num_proc.py"
DEAD = "One of the subprocesses has abruptly died during map operation.To debug the error, disable multiprocessing."
GIB = 1024**3


@pytest.fixture
def host(monkeypatch, tmp_path):
    counter = itertools.count()

    def apply(**fields) -> Path:
        tree = tmp_path / f"host{next(counter)}"
        apply_host(monkeypatch, HostProfile(**fields), tree, [policy])
        return tree

    return apply


class _BlockImport:
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by test)")
        return None


# 1. Loaded by path, never registered in sys.modules ---------------------------------------------


@pytest.mark.parametrize("source", [CANONICAL, TWIN], ids=["canonical", "twin"])
def test_module_loaded_by_path_without_registration_works(source):
    name = f"_policy_by_path_{source.parent.name}"
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert name not in sys.modules
    assert module.get_dataset_num_proc(1) is None
    decision = module.explain_dataset_num_proc(4, rows=100)
    assert decision.value == module.get_dataset_num_proc(4, rows=100)
    out = io.StringIO()
    assert module.main(["--json"], stdout=out) == 0
    assert json.loads(out.getvalue())["layer"] == "map"


# 2. No fork: train_on_responses_only gets None, never a Pool(1) -------------------------------------


class _Trainer:
    def __init__(self, train, eval_=None) -> None:
        self.train_dataset, self.eval_dataset = train, eval_


@pytest.mark.parametrize(
    "fields", [dict(start_method="spawn"), dict(platform="darwin", start_method="fork")], ids=["spawn", "macos"]
)
@pytest.mark.parametrize("num_proc", [None, 16, 1, 0])
def test_responses_only_without_fork_on_a_large_split_is_none(host, fields, num_proc):
    host(cpu_count=64, **fields)
    assert policy.resolve_responses_only_num_proc(_Trainer(range(5000)), num_proc=num_proc) is None
    assert (
        policy.resolve_responses_only_num_proc(_Trainer(range(10), {"eval": range(20000)}), num_proc=num_proc) is None
    )


def test_responses_only_without_fork_and_the_serial_hatch_is_none(host, monkeypatch):
    host(cpu_count=64, start_method="spawn", env={policy.NUM_PROC_ENV_VAR: "0"})
    assert policy.resolve_responses_only_num_proc(_Trainer(range(9000)), num_proc=8) is None


# 3. The start method is the default context's own ------------------------------------------------


def test_macos_default_context_is_read_not_the_list_order(host):
    # multiprocess on macOS lists spawn first while its default context forks.
    host(platform="darwin", start_method="fork", cpu_count=8)
    assert policy.multiprocessing_start_method() == "fork"
    decision = policy.explain_dataset_num_proc(4)
    assert decision.host.start_method == "fork" and decision.value is None and decision.decided_by == "platform"


def test_linux_default_spawn_is_read_although_fork_is_listed_first(host):
    host(start_method="spawn", cpu_count=8)
    assert policy.multiprocessing_start_method() == "spawn"


def test_macos_hatch_message_names_the_method_workers_really_use(host):
    host(platform="darwin", start_method="fork", cpu_count=8, env={policy.NUM_PROC_ENV_VAR: "4"})
    with pytest.raises(RuntimeError) as caught:
        with policy.map_failure_diagnostics(4):
            raise RuntimeError(DEAD)
    assert "start method 'fork'" in str(caught.value)


# 4. Never raise -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version, name", [("v1", "cpu.cfs_quota_us"), ("v2", "cpu.max")])
def test_a_200_digit_cpu_quota_is_no_limit(host, version, name):
    tree = host(cpu_count=8, cgroup=CgroupSpec(version=version, cpu_quota=2))
    leaf = next((tree / "cgroup").rglob(name))
    leaf.write_text("9" * 200 + ("\n" if version == "v1" else " 100000\n"))
    decision = policy.explain_dataset_num_proc()
    assert dict(decision.host.cpu_readings)["cgroup cpu quota"] is None
    assert decision.value == 4


def test_huge_meminfo_with_psutil_blocked_does_not_raise(host, monkeypatch, tmp_path, caplog):
    host(cpu_count=8)
    monkeypatch.delitem(sys.modules, "psutil")
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("psutil"), *sys.meta_path])
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 1 kB\nMemAvailable: {'9' * 400} kB\n")
    monkeypatch.setattr(policy, "PROC_MEMINFO", str(meminfo))
    decision = policy.explain_dataset_num_proc()
    assert decision.value == policy.UNKNOWN_MEMORY_AUTO_CAP  # an impossible reading counts as unreadable
    assert any("MemAvailable" in record.getMessage() for record in caplog.records)
    decision.format_table()


class _ReprRaises:
    def __repr__(self) -> str:
        raise ValueError("no repr for you")


def test_a_request_whose_repr_raises_auto_sizes(host, caplog):
    host(cpu_count=8)
    assert policy.get_dataset_num_proc(_ReprRaises()) == 4
    decision = policy.explain_dataset_num_proc(_ReprRaises())
    assert "_ReprRaises" in decision.requested
    json.dumps(decision.as_dict())
    assert len([r for r in caplog.records if "_ReprRaises" in r.getMessage()]) == 1


def test_a_5001_digit_request_is_clamped_and_printable(host):
    host(cpu_count=8, available_memory_gb=64)
    huge = 10**5000
    assert policy.get_dataset_num_proc(huge) == 32  # 64 GiB * 0.5 / 1 GiB
    decision = policy.explain_dataset_num_proc(huge, rows=huge, closure_bytes=huge)
    assert decision.value == 32
    assert decision.rows == decision.closure_bytes == policy.MAX_COUNT  # beyond any real map; printable
    decision.format_table()
    json.dumps(decision.as_dict())
    assert policy.get_dataset_num_proc(rows=huge, closure_bytes=huge) == 4


@pytest.mark.parametrize(
    "argv, env",
    [
        (["--closure-bytes", str(10**13), "--rows", "80000"], {}),
        (["--closure-bytes", "9" * 4000], {}),
        (["--rows", "9" * 4000, "--num-proc", "9" * 4000, "--json"], {}),
        (["--json"], {"LOCAL_WORLD_SIZE": "9" * 5000}),
        (["--json"], {policy.NUM_PROC_ENV_VAR: "9" * 5000}),
        ([], {policy.NUM_PROC_ENV_VAR: "9" * 40}),
        (["--json"], {policy.NUM_PROC_ENV_VAR: "0" * 5000 + "4", "LOCAL_WORLD_SIZE": "0" * 5000 + "1"}),
    ],
    ids=[
        "closure-1e13",
        "closure-4000-digits",
        "rows-and-request-4000-digits",
        "ranks",
        "hatch",
        "hatch-40-digits",
        "5000-leading-zeros",
    ],
)
def test_cli_with_huge_numbers_answers(host, argv, env):
    host(cpu_count=8, env=env)
    out = io.StringIO()
    assert policy.main(argv, stdout=out) == 0
    text = out.getvalue()
    assert json.loads(text)["layer"] == "map" if "--json" in argv else text.startswith("num_proc")


# 5. A blocking file cannot hang the policy --------------------------------------------------------


def test_a_fifo_in_the_cgroup_tree_does_not_hang(host, caplog):
    tree = host(cpu_count=8, cgroup=CgroupSpec(cpu_quota=2))
    fifo = next((tree / "cgroup").rglob("cpu.max"))
    fifo.unlink()
    os.mkfifo(fifo)
    answers = []
    worker = threading.Thread(target=lambda: answers.append(policy.get_dataset_num_proc()), daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():
        # Release the reader stuck in open() so the test process can go on.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=10)
        pytest.fail("get_dataset_num_proc() blocked on a FIFO")
    assert answers == [4]
    assert any("cpu.max" in record.getMessage() for record in caplog.records)


# 6. Forking while another thread warns -----------------------------------------------------------

FORK_SCRIPT = textwrap.dedent(
    """
    import logging, os, sys, threading, time
    import unsloth_zoo.dataset_num_proc as policy
    logging.getLogger(policy.__name__).addHandler(logging.NullHandler())
    logging.getLogger(policy.__name__).propagate = False
    os.environ[policy.NUM_PROC_ENV_VAR] = "banana"
    stop = threading.Event()

    def warn_forever():
        while not stop.is_set():
            for _ in range(50):
                policy.reset_warning_state()
            policy.environment_override()
            with policy.map_failure_diagnostics(2):
                pass

    # The lazy imports happen before any fork, as in a trainer: a fork during a first import would leave
    # CPython's own per-module import lock held in the child, which no policy can release.
    with policy.map_failure_diagnostics(2):
        pass
    sys.setswitchinterval(1e-6)  # hand the GIL over often, so forks land inside the other thread's locks
    threading.Thread(target=warn_forever, daemon=True).start()
    hung = 0
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            try:
                policy.reset_warning_state()
                policy.environment_override()
                with policy.map_failure_diagnostics(2):
                    pass
            finally:
                os._exit(0)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break
            time.sleep(0.001)
        else:
            hung += 1
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    stop.set()
    print("hung", hung)
    """
)


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="needs os.fork")
def test_200_forks_while_another_thread_warns_or_diagnoses_never_deadlock():
    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", FORK_SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hung", "0"]


# 7. map_failure_diagnostics: nested and overlapping contexts ----------------------------------------


def _reaper():
    import multiprocess.pool

    return multiprocess.pool.Pool.__dict__["_join_exited_workers"]


def test_nested_contexts_explain_a_death_once():
    with pytest.raises(RuntimeError) as caught:
        with policy.map_failure_diagnostics(2):
            with policy.map_failure_diagnostics(2):
                raise RuntimeError(DEAD)
    message = str(caught.value)
    assert message.count("A dataset map() worker died") == 1
    assert str(caught.value.__cause__) == DEAD


@pytest.mark.parametrize("exit_order", ["first-in-first-out", "last-in-first-out"])
def test_overlapping_contexts_restore_what_they_found(exit_order):
    before = _reaper()
    first, second = policy.map_failure_diagnostics(2), policy.map_failure_diagnostics(2)
    first.__enter__()
    second.__enter__()
    for context in [first, second] if exit_order == "first-in-first-out" else [second, first]:
        context.__exit__(None, None, None)
    assert _reaper() is before


def test_two_threads_overlapping_leave_the_pool_unpatched():
    # The first thread enters, the second enters, the first exits, then the second: not nested.
    before = _reaper()
    first_inside, second_inside, first_out = threading.Event(), threading.Event(), threading.Event()

    def first_map() -> None:
        with policy.map_failure_diagnostics(2):
            first_inside.set()
            second_inside.wait(timeout=10)
        first_out.set()

    def second_map() -> None:
        first_inside.wait(timeout=10)
        with policy.map_failure_diagnostics(2):
            second_inside.set()
            first_out.wait(timeout=10)

    threads = [threading.Thread(target=first_map), threading.Thread(target=second_map)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert first_out.is_set() and _reaper() is before


@pytest.mark.slow
def test_a_context_still_open_after_an_overlapping_one_exits_still_names_the_signal(monkeypatch, tmp_path):
    import datasets

    monkeypatch.delenv(policy.NUM_PROC_ENV_VAR, raising=False)
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("oom_kill 3\n")
    monkeypatch.setattr(policy, "PROC_VMSTAT", str(vmstat))
    datasets.disable_progress_bars()
    first, second = policy.map_failure_diagnostics(2), policy.map_failure_diagnostics(2)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    try:
        with pytest.raises(RuntimeError) as caught:
            try:
                datasets.Dataset.from_dict({"x": list(range(400))}).map(
                    _die_on_row_300, batched=True, batch_size=10, num_proc=2, load_from_cache_file=False
                )
            except BaseException as error:
                if not second.__exit__(type(error), error, error.__traceback__):
                    raise
    finally:
        datasets.enable_progress_bars()
    assert "killed by SIGKILL" in str(caught.value)


def _die_on_row_300(batch: dict) -> dict:
    if 300 in batch["x"]:
        import faulthandler

        faulthandler.disable()
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


# Issue 11 item 4: pickled_size measures what workers receive -----------------------------------------


def test_pickled_size_of_a_lambda_over_the_tokenizer_matches_dill(tokenizer):
    import dill

    function = lambda batch: tokenizer(batch["text"])  # noqa: E731
    measured = policy.pickled_size(function)
    expected = len(dill.dumps(function))
    assert measured is not None and abs(measured - expected) <= 0.1 * expected
    assert expected > 100_000  # the tokenizer itself, not a reference to it


def test_pickled_size_of_a_nested_closure_is_real(tokenizer):
    def make():
        prefix = "x" * 50_000

        def tokenize(batch):
            return tokenizer([prefix + text for text in batch["text"]])

        return tokenize

    size = policy.pickled_size(make())
    assert size is not None and size > 50_000


def test_pickled_size_without_dill_uses_pickle(monkeypatch):
    monkeypatch.delitem(sys.modules, "dill", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BlockImport("dill"), *sys.meta_path])
    assert policy.pickled_size(b"x" * 1000) >= 1000
    assert policy.pickled_size(lambda row: row) is None
    assert policy.pickled_size(threading.Lock()) is None


# Issue 15 item 2: --version -----------------------------------------------------------------------------


def test_version_names_the_distribution_and_the_source_path():
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "unsloth_zoo.dataset_num_proc", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "unsloth_zoo",
        version("unsloth_zoo"),
        "from",
        str(Path(policy.__file__).resolve()),
    ]


def test_twin_version_names_unsloth():
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "unsloth.dataset_num_proc", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["unsloth", version("unsloth")]
    assert result.stdout.split()[-1] == str(TWIN.resolve())


def test_version_from_a_checkout_that_is_not_installed_says_so(tmp_path):
    package = tmp_path / "unsloth_zoo_checkout" / "not_a_distribution"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "dataset_num_proc.py").write_text(CANONICAL.read_text())
    result = subprocess.run(
        [sys.executable, "-m", "not_a_distribution.dataset_num_proc", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=package.parent,
    )
    assert result.returncode == 0, result.stderr
    assert "not_a_distribution (not installed as a distribution)" in result.stdout
    assert str(package / "dataset_num_proc.py") in result.stdout
