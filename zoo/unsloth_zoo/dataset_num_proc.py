# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""How many worker processes may a `datasets` `Dataset.map()` use, here, now.

Every `map(num_proc=n)` worker gets its own pickled copy of the mapped closure and an Arrow
shard, so the answer depends on the start method `datasets` will really use, the CPUs and memory
this process may actually use (affinity mask and cgroup limits included), and how many ranks of one
job share the host. `UNSLOTH_DATASET_NUM_PROC` overrides everything.

Only the standard library is imported here; `psutil`, `multiprocess` and `dill` are read lazily.
"""

# No `from __future__ import annotations`: dataclasses would then look this module up in sys.modules,
# which fails when a tool loads the file by path without registering it.
import argparse
import contextlib
import dataclasses
import json
import logging
import math
import numbers
import os
import pickle
import signal
import stat
import sys
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, TextIO, Tuple

__all__ = [
    "AUTO_MIN_ROWS_PER_BATCHED_WORKER",
    "AUTO_MIN_ROWS_PER_WORKER",
    "AUTO_ROWS_PER_CLOSURE_MIB",
    "AUTO_NUM_PROC_CAP",
    "CGROUP_ROOT",
    "CONFIG_LAYER",
    "DATASET_NUM_PROC_LAYER",
    "INTENT_ATTRIBUTE",
    "IN_PROCESS_REQUEST",
    "MAP_LAYER",
    "MAX_COUNT",
    "MEMORY_BUDGET_FRACTION",
    "NUM_PROC_ENV_VAR",
    "PROC_MEMINFO",
    "PROC_SELF_CGROUP",
    "PROC_VMSTAT",
    "WORKER_MEMORY_BUDGET_GB",
    "ZOO_MIN_ROWS_FOR_MULTIPROC",
    "MAIN_FIRST_MAIN",
    "MAIN_FIRST_REST",
    "HostFacts",
    "NumProcDecision",
    "Step",
    "config_num_proc",
    "environment_override",
    "explain_dataset_num_proc",
    "get_dataset_num_proc",
    "is_auto_request",
    "is_streaming",
    "layer_of",
    "map_failure_diagnostics",
    "map_request",
    "multiprocessing_start_method",
    "pickled_size",
    "record_intent",
    "reset_warning_state",
    "resolve_responses_only_num_proc",
    "sized_map",
]

NUM_PROC_ENV_VAR = "UNSLOTH_DATASET_NUM_PROC"
AUTO_NUM_PROC_CAP = 8
WORKER_MEMORY_BUDGET_GB = 1.0
MEMORY_BUDGET_FRACTION = 0.5
ZOO_MIN_ROWS_FOR_MULTIPROC = 5000
# Auto-sizing gives each worker at least this many rows, plus this many per MiB of pickled closure each worker
# must unpickle; below that a worker costs more than it saves (`nox -s bench`: 8,000 rows of tokenizing ran
# 10 to 20% faster in-process than with 2 workers along the zoo's own map path).
AUTO_MIN_ROWS_PER_WORKER = 5000
# A batched map (a fast tokenizer's batch encoding already runs on every core) asks this many instead: the
# demo's 20,000 batched rows ran as fast in-process as with 2 workers at a third of the memory, while TRL's
# per-row maps of the same rows ran 1.4 times faster with 2 workers.
AUTO_MIN_ROWS_PER_BATCHED_WORKER = 12500
AUTO_ROWS_PER_CLOSURE_MIB = 2500
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF_CGROUP = "/proc/self/cgroup"
PROC_MEMINFO = "/proc/meminfo"
PROC_VMSTAT = "/proc/vmstat"

# Checked in order; the first that holds a positive integer is the number of ranks sharing this host.
LOCAL_RANK_ENV_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
# `mlx.launch` (ring backend) sets no local-size variable: its hostfile lists each rank's "ip:port" addresses.
MLX_RANK_ENV_VAR = "MLX_RANK"
MLX_HOSTFILE_ENV_VAR = "MLX_HOSTFILE"
# `main_first=`: inside a main-first block the local main rank maps alone, then the other local ranks together.
MAIN_FIRST_MAIN = "main"
MAIN_FIRST_REST = "rest"
SERIAL_OVERRIDE_WORDS = frozenset({"", "0", "1", "none", "null", "false"})
# Auto-sizing without a memory reading stays at this many workers.
UNKNOWN_MEMORY_AUTO_CAP = 2
GIB = 1024**3
# cgroup v1 writes "unlimited" as a page-rounded LONG_MAX; anything this large means no limit.
UNLIMITED_BYTES = 2**60

MAP_LAYER = "map"
# How the decision record names a map's `batched` argument.
_MAP_KINDS = {True: "a batched map", False: "a per-row map", None: "unknown"}
CONFIG_LAYER = "config"

# A 64-bit count: environment values longer than this are not plausible numbers (and int() of 4,300+ digits raises).
MAX_PLAUSIBLE_DIGITS = 18
# The largest count the escape hatch accepts, so advice to force a huge request names a value that works.
MAX_FORCED_COUNT = 10**MAX_PLAUSIBLE_DIGITS - 1
# A CPU quota above this many CPUs is no limit; dividing huge quotas would overflow a float.
MAX_PLAUSIBLE_CPUS = 2**32
READ_LIMIT_BYTES = 65536
# Row counts, closure sizes and requested counts beyond this are read as this: no real map comes near it.
MAX_COUNT = 2**63 - 1
# Numbers longer than this are shown by size, since str() of a 4,300+ digit int raises.
MAX_SHOWN_DIGITS = 30

logger = logging.getLogger(__name__)
_warned_messages: Set[str] = set()
_warned_lock = threading.Lock()
# Guards the pool's reaping step while diagnostics wrap and unwrap it.
_reaper_lock = threading.Lock()


def _reinit_locks_in_child() -> None:
    # Another thread may have held a lock when this process forked; the child has no thread to release it.
    global _warned_lock, _reaper_lock
    _warned_lock = threading.Lock()
    _reaper_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_locks_in_child)


def reset_warning_state() -> None:
    """Forget which warnings were already emitted, so each may be emitted once more."""
    with _warned_lock:
        _warned_messages.clear()


def _warn_once(message: str, key: Optional[str] = None) -> None:
    """Log `message` once per `key`; a key names the decision, so a message with measured figures is not repeated."""
    with _warned_lock:
        if (key or message) in _warned_messages:
            return
        _warned_messages.add(key or message)
    logger.warning(message)


# --------------------------------------------------------------------------- decision record


@dataclasses.dataclass(frozen=True)
class Step:
    """One change to the worker count: the count after it (None = in-process) and why."""

    count: Optional[int]
    reason: str


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """What the policy read from this host."""

    platform: str
    start_method: Optional[str]
    start_method_source: str
    workers_usable: bool
    usable_cpus: Optional[int]
    cpu_source: str
    cpu_readings: Tuple[Tuple[str, Optional[float]], ...]
    available_memory_bytes: Optional[int]
    memory_source: str
    memory_readings: Tuple[Tuple[str, Optional[int]], ...]
    local_ranks: int
    local_ranks_source: str


@dataclasses.dataclass(frozen=True)
class NumProcDecision:
    """The answer and everything that led to it; `value` is what `get_dataset_num_proc` returns."""

    value: Optional[int]
    layer: str
    requested: str
    request_kind: str
    rows: Optional[int]
    closure_bytes: Optional[int]
    batched: Optional[bool]
    decided_by: str
    host: HostFacts
    steps: Tuple[Step, ...]

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def format_table(self) -> str:
        host = self.host
        memory = "unknown" if host.available_memory_bytes is None else f"{host.available_memory_bytes / GIB:.2f} GiB"
        rows = [
            ("num_proc", "None (in-process)" if self.value is None else _show_int(self.value)),
            ("layer", self.layer),
            ("requested", f"{self.requested} ({self.request_kind})"),
            ("rows", "unknown" if self.rows is None else _show_int(self.rows)),
            ("closure", "unknown" if self.closure_bytes is None else f"{_show_mib(self.closure_bytes)} MiB pickled"),
            ("map kind", _MAP_KINDS[self.batched]),
            ("decided by", self.decided_by),
            ("platform", host.platform),
            ("start method", f"{host.start_method or 'unknown'} (from {host.start_method_source})"),
            ("workers usable", "yes" if host.workers_usable else "no"),
            (
                "usable CPUs",
                f"{host.usable_cpus if host.usable_cpus is not None else 'unknown'} (bound by {host.cpu_source})",
            ),
            ("available memory", f"{memory} (bound by {host.memory_source})"),
            ("local ranks", f"{host.local_ranks} (from {host.local_ranks_source})"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
        for number, step in enumerate(self.steps, 1):
            count = "in-process" if step.count is None else f"{step.count} workers"
            lines.append(f"{'step ' + str(number):<{width}}  {count}: {step.reason}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- safe text


def _show_int(number: int) -> str:
    """An integer as text, or its size in bits when it has too many digits to print."""
    if number.bit_length() > MAX_SHOWN_DIGITS * 3:
        return f"a {number.bit_length()}-bit number"
    return str(number)


def _show_mib(size: int) -> str:
    if size.bit_length() > MAX_SHOWN_DIGITS * 3:
        return _show_int(size // 2**20)
    return f"{size / 2**20:.2f}"


def _safe_repr(value: Any) -> str:
    """repr() of a caller's value, short, and never raising (a broken __repr__ or a 5,000-digit int)."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            text = _show_int(int(value))
        else:
            text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object with a broken repr>"
    return text if len(text) <= 80 else text[:77] + "..."


def _parse_plausible_count(word: str) -> Optional[int]:
    """A non-negative decimal integer of at most MAX_PLAUSIBLE_DIGITS digits, else None."""
    digits = word.lstrip("0") or "0"
    if word.isascii() and word.isdigit() and len(digits) <= MAX_PLAUSIBLE_DIGITS:
        return int(digits)  # leading zeros stripped: int() refuses 4,300+ characters, zeros included
    return None


# --------------------------------------------------------------------------- escape hatch


def parse_num_proc_override(text: Optional[str]) -> Tuple[str, Optional[int]]:
    """Classify a raw `UNSLOTH_DATASET_NUM_PROC` value as ("unset"|"serial"|"workers"|"invalid", count)."""
    if text is None:
        return "unset", None
    word = text.strip().lower()
    if word in SERIAL_OVERRIDE_WORDS:
        return "serial", None
    count = _parse_plausible_count(word)
    if count is not None:
        return ("workers", count) if count >= 2 else ("serial", None)
    return "invalid", None


def environment_override() -> Tuple[bool, Optional[int]]:
    """(True, n) or (True, None) for in-process when the escape hatch decides; (False, None) otherwise."""
    raw = os.environ.get(NUM_PROC_ENV_VAR)
    kind, count = parse_num_proc_override(raw)
    if kind == "invalid":
        _warn_once(
            f"Ignoring {NUM_PROC_ENV_VAR}={_safe_repr(raw)}: expected an integer >= 2 (at most {MAX_PLAUSIBLE_DIGITS} digits) for workers, "
            f"or 0/1/none/false/empty for in-process; deciding as if it were unset."
        )
        return False, None
    if kind == "unset":
        return False, None
    return True, count


# --------------------------------------------------------------------------- start method

_FORKING_START_METHOD = "fork"


def _platform_start_methods(platform: str) -> FrozenSet[str]:
    """The start methods this platform can offer at all, whatever a library claims."""
    if platform == "win32" or not hasattr(os, "fork"):
        return frozenset({"spawn"})
    return frozenset({"fork", "spawn", "forkserver"})


def _read_start_method(module: Any) -> Optional[str]:
    # allow_none=True reads a pinned method without pinning one; get_context() or allow_none=False would pin.
    method = module.get_start_method(allow_none=True)
    if method is None:
        # Unpinned, the default context answers; its list order is not the default (macOS lists spawn first).
        default_context = getattr(getattr(module.get_start_method, "__self__", None), "_default_context", None)
        method = getattr(default_context, "_name", None)
    return method if isinstance(method, str) else None


def _probe_start_method() -> Tuple[Optional[str], str]:
    offered = _platform_start_methods(sys.platform)
    for module_name in ("multiprocess", "multiprocessing"):
        try:
            module = __import__(module_name)
            method = _read_start_method(module)
        except Exception:
            continue
        if method in offered:
            return method, module_name
        if method is not None:
            _warn_once(
                f"{module_name} reports start method {method!r}, which {sys.platform} does not offer; not believing it."
            )
    return None, "unknown"


def multiprocessing_start_method() -> Optional[str]:
    """The start method `datasets` worker pools will use (read from `multiprocess`), or None when unknown."""
    return _probe_start_method()[0]


def _worker_veto(platform: str, method: Optional[str], source: str) -> Optional[str]:
    """Why worker processes cannot be used here, or None when they can."""
    if platform == "darwin":
        return "forking on macOS is unsafe (CPython bpo-33725), so workers are not used there"
    if method is None:
        return "the multiprocessing start method could not be determined"
    if method != _FORKING_START_METHOD:
        return f"start method {method!r} (from {source}) re-imports __main__ in every worker"
    return None


# --------------------------------------------------------------------------- cgroup parsing (pure)


def parse_proc_self_cgroup(text: str) -> Tuple[Optional[str], Dict[str, Tuple[str, str]]]:
    """Split /proc/self/cgroup into the v2 path and a {v1 controller: path} map; bad lines are skipped."""
    v2_path = None
    v1_paths: Dict[str, Tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path
            continue
        for controller in controllers.split(","):
            if controller:
                v1_paths[controller] = (controllers, path)
    return v2_path, v1_paths


def parse_cpu_max(text: str) -> Optional[float]:
    """CPUs allowed by a v2 `cpu.max` ("max 100000" is unlimited)."""
    fields = text.split()
    if len(fields) not in (1, 2):
        raise ValueError("expected '<quota|max> [period]'")
    if fields[0] == "max":
        return None
    quota = int(fields[0])
    period = int(fields[1]) if len(fields) == 2 else 100000
    if quota <= 0 or period <= 0:
        raise ValueError("quota and period must be positive")
    return _cpus_from_quota(quota, period)


def _cpus_from_quota(quota: int, period: int) -> Optional[float]:
    # A quota of more CPUs than any machine has is no limit, and dividing it could overflow a float.
    if quota // period >= MAX_PLAUSIBLE_CPUS:
        return None
    return quota / period


def parse_cfs_quota(quota_text: str, period_text: str) -> Optional[float]:
    """CPUs allowed by v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 is unlimited)."""
    quota = int(quota_text.strip())
    if quota < 0:
        return None
    period = int(period_text.strip())
    if quota == 0 or period <= 0:
        raise ValueError("quota and period must be positive")
    return _cpus_from_quota(quota, period)


def parse_memory_bytes(text: str) -> Optional[int]:
    """A memory limit or usage in bytes; "max" and v1's near-LONG_MAX mean unlimited (None)."""
    word = text.strip()
    if word == "max":
        return None
    value = int(word)
    if value < 0:
        raise ValueError("memory values cannot be negative")
    return None if value >= UNLIMITED_BYTES else value


def parse_stat_value(text: str, key: str) -> int:
    """The value of `key` in a flat "name value" file such as memory.stat or memory.events."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == key:
            return int(fields[1])
    raise ValueError(f"no {key!r} line")


# --------------------------------------------------------------------------- cgroup probing (I/O)


def _read_text(path: str) -> Optional[str]:
    """A small kernel file's text; None when absent, a warning when present but unreadable.

    Opened non-blocking and read up to READ_LIMIT_BYTES, and only when it is a regular file, so a FIFO or
    device where a kernel file should be cannot hang or flood the caller.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as error:
        _warn_once(f"Could not read {path} ({error}); ignoring it when sizing dataset workers.")
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError("not a regular file")
        chunks: List[bytes] = []
        size = 0
        while size < READ_LIMIT_BYTES:
            chunk = os.read(descriptor, READ_LIMIT_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks).decode("ascii")
    except Exception as error:
        _warn_once(f"Could not read {path} ({error}); ignoring it when sizing dataset workers.")
        return None
    finally:
        os.close(descriptor)


def _parse_or_warn(path: str, parse: Callable[..., Any], *texts: str) -> Any:
    try:
        return parse(*texts)
    except (ValueError, IndexError, ArithmeticError) as error:
        _warn_once(f"Could not parse {path} ({error}): {texts[0][:80]!r}; ignoring it when sizing dataset workers.")
        return None


def _cgroup_membership() -> Tuple[Optional[str], Dict[str, Tuple[str, str]]]:
    if not sys.platform.startswith("linux"):
        return None, {}
    text = _read_text(PROC_SELF_CGROUP)
    if text is None:
        _warn_once(f"{PROC_SELF_CGROUP} is missing; container CPU and memory limits cannot be seen.")
        return None, {}
    return parse_proc_self_cgroup(text)


def _walk_up(root: str, path: str) -> Iterator[str]:
    """Directories from this process's cgroup up to the hierarchy root, innermost first."""
    parts = [part for part in path.split("/") if part and part != "."]
    if ".." in parts:
        parts = []
    # Without a cgroup namespace the path can name directories the mount does not show: start lower.
    while parts and not os.path.isdir(os.path.join(root, *parts)):
        parts.pop()
    while True:
        yield os.path.join(root, *parts)
        if not parts:
            return
        parts.pop()


def _v2_root() -> Optional[str]:
    for candidate in (CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")):
        if os.path.isfile(os.path.join(candidate, "cgroup.controllers")):
            return candidate
    return None


def _v1_root(controller: str, controllers_field: str) -> Optional[str]:
    for name in (controllers_field, controller):
        candidate = os.path.join(CGROUP_ROOT, name)
        if os.path.isdir(candidate):
            return candidate
    return None


def _cgroup_dirs(kind: str) -> Iterator[Tuple[str, str]]:
    """(version, directory) pairs for the "cpu" or "memory" controller, innermost first, v2 before v1."""
    v2_path, v1_paths = _cgroup_membership()
    v2_root = _v2_root() if v2_path is not None else None
    if v2_root is not None and v2_path is not None:
        for directory in _walk_up(v2_root, v2_path):
            yield "v2", directory
    if kind in v1_paths:
        controllers_field, path = v1_paths[kind]
        v1_root = _v1_root(kind, controllers_field)
        if v1_root is not None:
            for directory in _walk_up(v1_root, path):
                yield "v1", directory


def _cgroup_cpu_limit() -> Optional[float]:
    """The tightest CPU quota on the way from this process's cgroup to the root, in CPUs."""
    limits: List[float] = []
    for version, directory in _cgroup_dirs("cpu"):
        if version == "v2":
            path = os.path.join(directory, "cpu.max")
            text = _read_text(path)
            limit = None if text is None else _parse_or_warn(path, parse_cpu_max, text)
        else:
            quota_path = os.path.join(directory, "cpu.cfs_quota_us")
            quota = _read_text(quota_path)
            period = _read_text(os.path.join(directory, "cpu.cfs_period_us"))
            limit = (
                None if quota is None or period is None else _parse_or_warn(quota_path, parse_cfs_quota, quota, period)
            )
        if limit is not None:
            limits.append(limit)
    return min(limits) if limits else None


def _read_working_set(directory: str, usage_file: str, inactive_key: str) -> Optional[int]:
    """Usage of one cgroup directory minus its reclaimable page cache, as the kubelet counts it."""
    usage_path = os.path.join(directory, usage_file)
    usage_text = _read_text(usage_path)
    if usage_text is None:
        return None
    usage = _parse_or_warn(usage_path, parse_memory_bytes, usage_text)
    if usage is None:
        return None
    stat_path = os.path.join(directory, "memory.stat")
    stat_text = _read_text(stat_path)
    inactive = 0
    if stat_text is not None:
        inactive = _parse_or_warn(stat_path, parse_stat_value, stat_text, inactive_key) or 0
    return max(int(usage) - int(inactive), 0)


def _cgroup_free_memory() -> Optional[int]:
    """The least memory any cgroup on the way to the root still allows, never below 0."""
    free: List[int] = []
    for version, directory in _cgroup_dirs("memory"):
        limit_files: Tuple[str, ...]
        if version == "v2":
            limit_files, usage_file, inactive_key = ("memory.max", "memory.high"), "memory.current", "inactive_file"
        else:
            limit_files, usage_file, inactive_key = (
                ("memory.limit_in_bytes",),
                "memory.usage_in_bytes",
                "total_inactive_file",
            )
        limits: List[int] = []
        for name in limit_files:
            path = os.path.join(directory, name)
            text = _read_text(path)
            limit = None if text is None else _parse_or_warn(path, parse_memory_bytes, text)
            if limit is not None:
                limits.append(limit)
        if not limits:
            continue
        used = _read_working_set(directory, usage_file, inactive_key)
        if used is None:
            _warn_once(f"{directory} sets a memory limit but its usage is unreadable; assuming it is all free.")
            used = 0
        free.append(max(min(limits) - used, 0))
    return min(free) if free else None


# --------------------------------------------------------------------------- host CPUs and memory


def _usable_cpus() -> Tuple[Optional[int], str, Tuple[Tuple[str, Optional[float]], ...]]:
    readings: List[Tuple[str, Optional[float]]] = []
    try:
        logical = os.cpu_count()
    except Exception:
        logical = None
    readings.append(("os.cpu_count", logical))
    affinity = None
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            affinity = len(getaffinity(0))
        except Exception:
            affinity = None
    readings.append(("affinity mask", affinity))
    readings.append(("cgroup cpu quota", _cgroup_cpu_limit()))
    known = [(value, source) for source, value in readings if isinstance(value, (int, float)) and 0 < value < math.inf]
    if not known:
        return None, "nothing (CPU count unknown)", tuple(readings)
    value, source = min(known, key=lambda item: item[0])
    return max(int(math.floor(value)), 1), source, tuple(readings)


def _plausible_memory(value: Optional[int], source: str) -> Optional[int]:
    """A host memory reading, or None with a warning when it is negative or beyond any machine (2**60 bytes)."""
    if value is None:
        return None
    if 0 <= value < UNLIMITED_BYTES:
        return value
    _warn_once(f"Ignoring {source}: {_show_int(value)} bytes is not a possible amount of memory.")
    return None


def _host_available_memory() -> Optional[int]:
    try:
        import psutil  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception:
        psutil = None
    if psutil is not None:
        try:
            return _plausible_memory(int(psutil.virtual_memory().available), "psutil.virtual_memory().available")
        except Exception as error:
            _warn_once(f"psutil.virtual_memory() failed ({_safe_repr(error)}); falling back to {PROC_MEMINFO}.")
    if not sys.platform.startswith("linux"):
        return None
    text = _read_text(PROC_MEMINFO)
    if text is None:
        return None
    kibibytes = _parse_or_warn(
        PROC_MEMINFO, parse_stat_value, text.replace(":", " ").replace(" kB", ""), "MemAvailable"
    )
    return None if kibibytes is None else _plausible_memory(kibibytes * 1024, f"MemAvailable in {PROC_MEMINFO}")


def _available_memory() -> Tuple[Optional[int], str, Tuple[Tuple[str, Optional[int]], ...]]:
    readings = (("host available", _host_available_memory()), ("cgroup free", _cgroup_free_memory()))
    known = [(value, source) for source, value in readings if value is not None]
    if not known:
        return None, "nothing (memory unreadable)", readings
    value, source = min(known, key=lambda item: item[0])
    return value, source, readings


def parse_mlx_hostfile(text: str) -> List[FrozenSet[str]]:
    """Each rank's set of IP addresses from the ring backend's hostfile (a JSON list of "ip:port" lists)."""
    if not text.strip():
        return []  # mlx.launch writes an empty hostfile for a single rank
    try:
        entries = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a hostfile") from None
    if not isinstance(entries, list) or not all(
        isinstance(entry, list) and entry and all(isinstance(address, str) and ":" in address for address in entry)
        for entry in entries
    ):
        raise ValueError("expected a JSON list with one list of 'ip:port' strings per rank")
    return [frozenset(address.rsplit(":", 1)[0] for address in entry) for entry in entries]


def count_ranks_sharing_host(hosts: Sequence[FrozenSet[str]], rank: int) -> Tuple[int, int]:
    """(ranks on `rank`'s host, `rank`'s index among them): ranks whose addresses overlap share a host."""
    mine = hosts[rank]
    sharing = [other for other in range(len(hosts)) if hosts[other] & mine]
    return len(sharing), sharing.index(rank)


def mlx_ranks_on_this_host(hostfile_path: Optional[str], rank_text: Optional[str]) -> Tuple[int, int]:
    """(local ranks, local rank) from `MLX_HOSTFILE` and `MLX_RANK`; (1, 0) with a warning when unreadable."""
    if not hostfile_path or rank_text is None:
        return 1, 0
    rank = _parse_plausible_count(rank_text.strip())
    text = _read_text(hostfile_path)
    try:
        hosts = parse_mlx_hostfile(text or "")
    except ValueError as error:
        _warn_once(f"Ignoring {MLX_HOSTFILE_ENV_VAR}={_safe_repr(hostfile_path)}: {error}.")
        return 1, 0
    if rank is None or rank >= len(hosts):
        if hosts:
            _warn_once(
                f"Ignoring {MLX_RANK_ENV_VAR}={_safe_repr(rank_text)}: not a rank of the {len(hosts)} in the hostfile."
            )
        return 1, 0
    return count_ranks_sharing_host(hosts, rank)


def _local_ranks() -> Tuple[int, str]:
    for name in LOCAL_RANK_ENV_VARS:
        raw = os.environ.get(name)
        if raw is None:
            continue
        count = _parse_plausible_count(raw.strip())
        if count is not None and count >= 1:
            return count, name
        _warn_once(f"Ignoring {name}={_safe_repr(raw)}: not a positive integer number of local ranks.")
    count, _ = mlx_ranks_on_this_host(os.environ.get(MLX_HOSTFILE_ENV_VAR), os.environ.get(MLX_RANK_ENV_VAR))
    if count > 1:
        return count, f"{MLX_HOSTFILE_ENV_VAR} (ranks whose addresses overlap this rank's)"
    return 1, "no local-rank variable set"


def _probe_host() -> HostFacts:
    method, method_source = _probe_start_method()
    cpus, cpu_source, cpu_readings = _usable_cpus()
    memory, memory_source, memory_readings = _available_memory()
    ranks, ranks_source = _local_ranks()
    return HostFacts(
        platform=sys.platform,
        start_method=method,
        start_method_source=method_source,
        workers_usable=_worker_veto(sys.platform, method, method_source) is None,
        usable_cpus=cpus,
        cpu_source=cpu_source,
        cpu_readings=cpu_readings,
        available_memory_bytes=memory,
        memory_source=memory_source,
        memory_readings=memory_readings,
        local_ranks=ranks,
        local_ranks_source=ranks_source,
    )


# --------------------------------------------------------------------------- the policy


def _read_request(desired: Any) -> Tuple[str, Optional[int]]:
    """("auto"|"serial"|"explicit"|"unreadable", count) for what a caller passed as `desired`; warns of nothing."""
    try:
        if desired is None or isinstance(desired, bool):
            return "auto", None
        if isinstance(desired, numbers.Integral):
            count = min(int(desired), MAX_COUNT)
            return ("explicit", count) if count > 1 else ("serial", None)
    except Exception:
        pass
    return "unreadable", None


def _classify_request(desired: Any) -> Tuple[str, Optional[int]]:
    """("auto"|"serial"|"explicit", count) for what a caller passed as `desired`."""
    kind, count = _read_request(desired)
    if kind != "unreadable":
        return kind, count
    _warn_once(f"Ignoring num_proc={_safe_repr(desired)}: a worker count must be an integer; sizing automatically.")
    return "auto", None


def is_auto_request(request: Any) -> bool:
    """Whether the policy auto-sizes `request`: None, a bool, or anything that is not an integer."""
    return _read_request(request)[0] in ("auto", "unreadable")


def _as_count(value: Any) -> Optional[int]:
    """A non-negative integer a map site passed (rows, closure bytes) as a plain int, else None."""
    try:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            count = int(value)
            return min(count, MAX_COUNT) if count >= 0 else None
    except Exception:
        pass
    return None


def _as_flag(value: Any, name: str) -> Optional[bool]:
    """A map site's yes/no argument as a bool; None when not given or when its truth value cannot be read."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return bool(value)
    except Exception as error:
        _warn_once(
            f"Ignoring {name}={_safe_repr(value)} ({type(error).__name__} reading it): sizing the map as per-row.",
            key=f"unreadable {name}",
        )
        return None


def _encode(count: Optional[int], serial_as_none: bool, workers_usable: bool) -> Optional[int]:
    """Express a count for its layer: in-process is None at a map() call, 1 in a config while workers work."""
    if count is not None:
        return count
    if serial_as_none or not workers_usable:
        return None
    return 1


class _Sizing:
    """One decision in progress: what the caller passed, what the host is, and the steps taken so far."""

    def __init__(
        self,
        desired: Any,
        serial_as_none: bool,
        rows: Any,
        closure_bytes: Any,
        closure: Any,
        main_first: Any,
        batched: Any = None,
    ) -> None:
        self.desired = desired
        self.serial_as_none = bool(serial_as_none)
        self.host = _probe_host()
        self.running, self.running_reason = _running_ranks(self.host.local_ranks, main_first)
        self.steps: List[Step] = []
        self.rows = _as_count(rows)
        self.closure_bytes = _as_count(closure_bytes)
        self.closure = closure
        self.batched = _as_flag(batched, "batched")
        self.request_kind = "auto"
        self.requested: Optional[int] = None
        self.count: Optional[int] = None
        self._request_read = False

    def read_request(self) -> None:
        if not self._request_read:
            self._request_read = True
            self.request_kind, self.requested = _classify_request(self.desired)

    def step(self, count: Optional[int], reason: str) -> None:
        self.steps.append(Step(count, reason))

    def decide(self, count: Optional[int], decided_by: str, request_kind: Optional[str] = None) -> NumProcDecision:
        return NumProcDecision(
            value=_encode(count, self.serial_as_none, self.host.workers_usable),
            layer=MAP_LAYER if self.serial_as_none else CONFIG_LAYER,
            requested=_safe_repr(self.desired),
            request_kind=request_kind or self.request_kind,
            rows=self.rows,
            closure_bytes=self.closure_bytes,
            batched=self.batched,
            decided_by=decided_by,
            host=self.host,
            steps=tuple(self.steps),
        )

    def kept(self) -> NumProcDecision:
        return self.decide(self.count, "auto" if self.request_kind == "auto" else "request")


def _hatch_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """`UNSLOTH_DATASET_NUM_PROC` decides, uncapped and unvetoed."""
    decided, override = environment_override()
    if not decided:
        return None
    sizing.step(override, f"{NUM_PROC_ENV_VAR}={_safe_repr(os.environ.get(NUM_PROC_ENV_VAR))} decides, uncapped")
    return sizing.decide(override, "environment", request_kind="hatch")


def _veto_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """No workers where the start method is not fork, or on macOS."""
    sizing.read_request()
    host = sizing.host
    veto = _worker_veto(host.platform, host.start_method, host.start_method_source)
    if veto is None:
        return None
    if sizing.requested is not None:
        _warn_once(
            f"Running dataset map() in-process instead of with {_show_int(sizing.requested)} workers: {veto}. "
            f"Set {NUM_PROC_ENV_VAR}=<n> to force n workers anyway."
        )
    sizing.step(None, veto)
    return sizing.decide(None, "platform")


def _request_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """A serial request runs in-process; an explicit one is the count, not capped by CPUs."""
    sizing.read_request()
    if sizing.request_kind == "serial":
        sizing.step(None, f"num_proc={_safe_repr(sizing.desired)} asks for in-process")
        return sizing.decide(None, "request")
    if sizing.requested is not None:
        sizing.count = sizing.requested
        sizing.step(sizing.count, f"num_proc={_show_int(sizing.requested)} requested (not capped by CPUs)")
        if sizing.running_reason is not None:
            sizing.step(sizing.count, sizing.running_reason)
    return None


def _cpu_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """Auto: half the usable CPUs of this rank, at least 2, capped."""
    if sizing.count is not None:
        return None
    host = sizing.host
    cpus, running = host.usable_cpus, sizing.running
    if cpus is not None and running > 1:
        cpus = cpus // running
    if sizing.running_reason is not None or running > 1:
        shared = sizing.running_reason or f"{running} local ranks share the host"
        sizing.step(None, f"{shared}: {'unknown' if cpus is None else cpus} CPUs for this rank")
    if cpus is None or cpus <= 1:
        sizing.step(None, f"{'unknown' if cpus is None else cpus} usable CPUs: no room for workers")
        return sizing.decide(None, "auto")
    sizing.count = min(max(cpus // 2, 2), AUTO_NUM_PROC_CAP)
    sizing.step(sizing.count, f"half of {cpus} usable CPUs, at least 2, capped at {AUTO_NUM_PROC_CAP}")
    return None


def _auto_rows_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """Auto: each worker gets its share of rows, more for a heavier closure (weighed only if rows leave room)."""
    if sizing.request_kind != "auto" or sizing.count is None:
        return None
    rows, batched = sizing.rows, sizing.batched
    if sizing.closure is not None and (rows is None or rows // _rows_per_worker(sizing.closure_bytes, batched) >= 2):
        measured = pickled_size(sizing.closure)
        if measured is not None:
            sizing.closure_bytes = max(sizing.closure_bytes or 0, measured)
    rows_per_worker = _rows_per_worker(sizing.closure_bytes, batched)
    if rows is None or rows // rows_per_worker >= sizing.count:
        return None
    sizing.count = rows // rows_per_worker
    kind = "" if batched is None else f" ({_MAP_KINDS[batched]})"
    if sizing.count < 2:
        sizing.step(None, f"{_show_int(rows)} rows cannot give 2 workers {_show_int(rows_per_worker)} rows each{kind}")
        return sizing.decide(None, "rows")
    sizing.step(
        sizing.count,
        f"{_show_int(rows)} rows give {sizing.count} workers {_show_int(rows_per_worker)} rows each{kind}",
    )
    return None


def _row_cap_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """No request gets more workers than rows; datasets itself would lower it, possibly to a Pool(1)."""
    rows, count = sizing.rows, sizing.count
    if rows is None or count is None or rows >= count:
        return None
    sizing.count = rows
    if rows < 2:
        sizing.step(None, f"{rows} rows leave no work for a second worker")
        return sizing.decide(None, "rows")
    sizing.step(rows, f"no more workers than the {_show_int(rows)} rows")
    return None


def _memory_stage(sizing: _Sizing) -> Optional[NumProcDecision]:
    """At most what half the available memory covers at the worker budget; fewer than 2 is in-process."""
    host, count = sizing.host, sizing.count
    assert count is not None  # every earlier path without a count has decided
    memory = host.available_memory_bytes
    if memory is None:
        if sizing.request_kind == "auto" and count > UNKNOWN_MEMORY_AUTO_CAP:
            sizing.count = UNKNOWN_MEMORY_AUTO_CAP
            sizing.step(sizing.count, f"available memory unreadable: auto-sizing stays at {sizing.count} workers")
        else:
            sizing.step(count, "available memory unreadable: the count is kept")
        return sizing.kept()
    share = memory / sizing.running
    affordable = int(math.floor(share / GIB * MEMORY_BUDGET_FRACTION / WORKER_MEMORY_BUDGET_GB))
    budget = (
        f"{share / GIB:.1f} GiB available{' to this rank' if sizing.running > 1 else ''} "
        f"({host.memory_source}) covers {affordable} workers at {WORKER_MEMORY_BUDGET_GB:g} GiB each "
        f"within {MEMORY_BUDGET_FRACTION:.0%} of it"
    )
    if affordable < 2:
        _warn_once(
            f"Running dataset map() in-process: {budget}. Set {NUM_PROC_ENV_VAR}=<n> to force n workers anyway.",
            key="memory: in-process",
        )
        sizing.step(None, budget)
        return sizing.decide(None, "memory")
    if affordable < count:
        if sizing.request_kind == "explicit":
            forced = min(count, MAX_FORCED_COUNT)
            _warn_once(
                f"Using {affordable} dataset map() workers instead of {_show_int(count)}: {budget}. "
                f"Set {NUM_PROC_ENV_VAR}={forced} to force {forced} workers anyway.",
                key=f"memory: {affordable} instead of {_show_int(count)}",
            )
        sizing.step(affordable, budget)
        return sizing.decide(affordable, "memory")
    return sizing.kept()


# The policy, in order: each stage returns the decision, or None to pass the count on; memory always decides.
_STAGES: Tuple[Callable[[_Sizing], Optional[NumProcDecision]], ...] = (
    _hatch_stage,
    _veto_stage,
    _request_stage,
    _cpu_stage,
    _auto_rows_stage,
    _row_cap_stage,
    _memory_stage,
)


def explain_dataset_num_proc(
    desired: Any = None,
    *,
    serial_as_none: bool = True,
    rows: Optional[int] = None,
    closure_bytes: Optional[int] = None,
    closure: Any = None,
    main_first: Optional[str] = None,
    batched: Optional[bool] = None,
) -> NumProcDecision:
    """Decide the worker count and return the full record of how it was decided.

    `rows` and `closure_bytes` (the mapped function's pickled size), when the map site knows them, let
    auto-sizing keep small maps and heavy closures in-process. `closure` is what workers would receive
    (the function, its arguments): it is pickled and weighed, never below `closure_bytes`, only when auto
    still has room for workers after the rows, since pickling a tokenizer costs a small map its speed.
    `main_first` ("main" or "rest") says this map runs inside a main-first block, which changes how many
    local ranks map at the same time as this one. `batched` is the map's own argument: a batched map asks
    AUTO_MIN_ROWS_PER_BATCHED_WORKER rows of each worker, a per-row or unknown one AUTO_MIN_ROWS_PER_WORKER.
    """
    sizing = _Sizing(desired, serial_as_none, rows, closure_bytes, closure, main_first, batched)
    for stage in _STAGES:
        decision = stage(sizing)
        if decision is not None:
            return decision
    raise AssertionError("the memory stage always decides")


def _running_ranks(local_ranks: int, main_first: Any) -> Tuple[int, Optional[str]]:
    """How many local ranks map at the same time as this one, and the rule that said so (None: all of them)."""
    if main_first is None or local_ranks <= 1:
        return local_ranks, None
    if isinstance(main_first, str) and main_first == MAIN_FIRST_MAIN:
        return 1, f"the local main rank maps first while the other {local_ranks - 1} wait"
    if isinstance(main_first, str) and main_first == MAIN_FIRST_REST:
        others = local_ranks - 1
        return others, f"after the local main rank, {others} local rank{'s map' if others > 1 else ' maps'} at once"
    _warn_once(f"Ignoring main_first={_safe_repr(main_first)}: expected {MAIN_FIRST_MAIN!r} or {MAIN_FIRST_REST!r}.")
    return local_ranks, None


def _rows_per_worker(closure_size: Optional[int], batched: Optional[bool]) -> int:
    # Integer arithmetic: a float would overflow on a huge size.
    floor = AUTO_MIN_ROWS_PER_BATCHED_WORKER if batched else AUTO_MIN_ROWS_PER_WORKER
    return floor + (0 if closure_size is None else AUTO_ROWS_PER_CLOSURE_MIB * closure_size // 2**20)


def get_dataset_num_proc(
    desired: Any = None,
    *,
    serial_as_none: bool = True,
    rows: Optional[int] = None,
    closure_bytes: Optional[int] = None,
    closure: Any = None,
    main_first: Optional[str] = None,
    batched: Optional[bool] = None,
) -> Optional[int]:
    """The `num_proc` to use: a worker count >= 2, or the layer's in-process value (None at map(), 1 in a config)."""
    return explain_dataset_num_proc(
        desired,
        serial_as_none=serial_as_none,
        rows=rows,
        closure_bytes=closure_bytes,
        closure=closure,
        main_first=main_first,
        batched=batched,
    ).value


def pickled_size(function: Any) -> Optional[int]:
    """Bytes of `function` pickled as each worker receives it: with `dill` (what `multiprocess` sends)
    when importable, else with `pickle`; None when it cannot be pickled."""
    try:
        import dill  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception:
        dill = None
    try:
        if dill is not None:
            return len(dill.dumps(function))
        return len(pickle.dumps(function, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return None


# --------------------------------------------------------------------------- train_on_responses_only


def _split_sizes(trainer: Any) -> List[Optional[int]]:
    """Row counts of the trainer's train and eval splits; None for a split without a length (streaming)."""
    sizes: List[Optional[int]] = []
    for attribute in ("train_dataset", "eval_dataset"):
        value = getattr(trainer, attribute, None)
        if value is None:
            continue
        splits = list(value.values()) if isinstance(value, dict) else [value]
        for split in splits:
            try:
                sizes.append(len(split))
            except Exception:
                sizes.append(None)
    return sizes


def resolve_responses_only_num_proc(trainer: Any, num_proc: Any = None) -> Optional[int]:
    """The `num_proc` to hand the zoo's `train_on_responses_only`, so serial never turns into auto-sizing.

    The zoo auto-sizes a bare None when any split reaches ZOO_MIN_ROWS_FOR_MULTIPROC rows, so serial is
    written as 1 there, but only where forking works: without it no auto-sizer can add workers, and a 1
    would build a spawned Pool(1). Elsewhere serial is None. The escape hatch wins.
    """
    sizes = [size for size in _split_sizes(trainer) if size is not None]
    any_large = any(size >= ZOO_MIN_ROWS_FOR_MULTIPROC for size in sizes)
    method, method_source = _probe_start_method()
    forking = _worker_veto(sys.platform, method, method_source) is None
    serial = 1 if any_large and forking else None
    decided, override = environment_override()
    if decided:
        return serial if override is None else override
    request_kind, _ = _classify_request(num_proc)
    if request_kind == "auto" and not any_large:
        return None
    count = get_dataset_num_proc(num_proc, rows=max(sizes) if sizes else None)
    return serial if count is None else count


# --------------------------------------------------------------------------- dead-worker diagnostics

DEAD_WORKER_MESSAGE = "One of the subprocesses has abruptly died during map operation"


def _read_oom_kill_counters() -> Dict[str, int]:
    """oom_kill counters readable now: this process's memory cgroups, innermost first, then the host's."""
    counters: Dict[str, int] = {}
    for version, directory in _cgroup_dirs("memory"):
        path = os.path.join(directory, "memory.events" if version == "v2" else "memory.oom_control")
        text = _read_text(path)
        if text is not None:
            with contextlib.suppress(ValueError):
                counters[path] = parse_stat_value(text, "oom_kill")
    if sys.platform.startswith("linux"):
        text = _read_text(PROC_VMSTAT)
        if text is not None:
            with contextlib.suppress(ValueError):
                counters[PROC_VMSTAT] = parse_stat_value(text, "oom_kill")
    return counters


# Marks the pool's reaping step while diagnostics wrap it; the mark lives on the wrapper itself, so every
# copy of this module (the zoo's and unsloth's twin) shares one wrapper and one set of open contexts.
_RECORDERS_ATTRIBUTE = "_unsloth_worker_exit_recorders"
_ORIGINAL_ATTRIBUTE = "_unsloth_original_reaper"
# Set on an error this module already explained, so an enclosing context passes it through unchanged.
_EXPLAINED_ATTRIBUTE = "_unsloth_worker_death_explained"


class _WorkerExitRecorder:
    """Records the exit code of every pool worker reaped while it is open; open recorders share one wrapper."""

    def __init__(self) -> None:
        self.exits: List[Tuple[int, int]] = []
        self._installed_on: List[Any] = []

    def install(self) -> None:
        with _reaper_lock:
            for module_name in ("multiprocess.pool", "multiprocessing.pool"):
                try:
                    pool_class = __import__(module_name, fromlist=["Pool"]).Pool
                    current = pool_class.__dict__["_join_exited_workers"]
                except Exception:
                    continue
                recorders = getattr(current, _RECORDERS_ATTRIBUTE, None)
                if recorders is None:
                    current = _recording_reaper(current)
                    recorders = getattr(current, _RECORDERS_ATTRIBUTE)
                    pool_class._join_exited_workers = current
                recorders.append(self)
                self._installed_on.append(pool_class)

    def uninstall(self) -> None:
        with _reaper_lock:
            while self._installed_on:
                pool_class = self._installed_on.pop()
                current = pool_class.__dict__.get("_join_exited_workers")
                recorders = getattr(current, _RECORDERS_ATTRIBUTE, None)
                if recorders is None:
                    continue  # someone replaced our wrapper; theirs is not ours to undo
                with contextlib.suppress(ValueError):
                    recorders.remove(self)
                if not recorders:
                    pool_class._join_exited_workers = getattr(current, _ORIGINAL_ATTRIBUTE)


def _recording_reaper(original: Any) -> Any:
    """A staticmethod wrapping the pool's reaping step that tells every open recorder which workers died."""
    reap = original.__func__ if isinstance(original, staticmethod) else original
    recorders: List[_WorkerExitRecorder] = []

    def recording_reap(pool: Any) -> Any:
        # Look after reaping: a worker may finish exiting between any earlier look and the reap.
        before = list(pool)
        cleaned = reap(pool)
        for worker in before:
            if worker not in pool and worker.exitcode:
                for recorder in list(recorders):
                    recorder.exits.append((worker.pid, worker.exitcode))
        return cleaned

    wrapper = staticmethod(recording_reap)
    setattr(wrapper, _RECORDERS_ATTRIBUTE, recorders)
    setattr(wrapper, _ORIGINAL_ATTRIBUTE, original)
    return wrapper


def _describe_exit(pid: int, exitcode: int) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker pid {pid} was killed by {name} (exit code {exitcode})"
    return f"worker pid {pid} exited with code {exitcode}"


def _explain_dead_worker(
    num_proc: Any,
    exits: List[Tuple[int, int]],
    oom_before: Dict[str, int],
    oom_after: Dict[str, int],
    memory: Optional[int],
) -> str:
    method, method_source = _probe_start_method()
    workers = _as_count(num_proc) or 1
    fired = {
        path: oom_after[path] - before for path, before in oom_before.items() if oom_after.get(path, before) > before
    }
    causes: List[str] = []
    if exits:
        causes.append(_describe_exit(*exits[0]))
    if fired:
        causes.append(
            "the kernel OOM killer fired during the map ("
            + ", ".join(
                f"oom_kill +{delta} {'host-wide, possibly another process, in' if path == PROC_VMSTAT else 'in'} {path}"
                for path, delta in fired.items()
            )
            + ")"
        )
    elif oom_before:
        causes.append("the OOM-kill counters did not change, so the kernel OOM killer did not fire")
    if not exits and not oom_before:
        cause = (
            "The cause could not be observed: no worker exit status was recorded and no OOM-kill counter was readable."
        )
    else:
        cause = "Observed: " + "; ".join(causes) + "."
    available = "unknown" if memory is None else f"{memory / GIB:.1f} GiB"
    needed = f"{workers * WORKER_MEMORY_BUDGET_GB:g}" if workers.bit_length() <= 64 else "far more than any host's"
    return (
        f"A dataset map() worker died (datasets: {DEAD_WORKER_MESSAGE!r}). "
        f"The map ran {_show_int(workers)} worker process(es) with start method {method or 'unknown'!r} (from {method_source}). "
        f"{cause} Each worker holds its own copy of the mapped function and an Arrow shard: {_show_int(workers)} workers "
        f"needed roughly {needed} GiB at {WORKER_MEMORY_BUDGET_GB:g} GiB each, "
        f"with {available} available when the map started. "
        f"To run this map in-process, set {NUM_PROC_ENV_VAR}=0: the policy then returns num_proc=None, "
        f"and datasets builds no worker pool at all. To choose the count yourself, set {NUM_PROC_ENV_VAR}=<n>."
    )


@contextlib.contextmanager
def map_failure_diagnostics(num_proc: Any) -> Iterator[None]:
    """Wrap a `Dataset.map(num_proc=num_proc)` call so a dead worker says what killed it and what to do."""
    memory = _available_memory()[0]
    oom_before = _read_oom_kill_counters()
    recorder = _WorkerExitRecorder()
    recorder.install()
    try:
        yield
    except RuntimeError as error:
        if DEAD_WORKER_MESSAGE not in str(error) or getattr(error, _EXPLAINED_ATTRIBUTE, False):
            raise
        message = _explain_dead_worker(num_proc, recorder.exits, oom_before, _read_oom_kill_counters(), memory)
        explained = RuntimeError(message)
        setattr(explained, _EXPLAINED_ATTRIBUTE, True)
        raise explained from error
    finally:
        recorder.uninstall()


# --------------------------------------------------------------------------- what map sites and configs call

# Which encoding each trainer family's config writes `dataset_num_proc` in: "config" for a value the zoo's
# `sft_prepare_dataset` reads (None there means auto), "map" for one passed straight to `Dataset.map`.
DATASET_NUM_PROC_LAYER = {
    "sft": CONFIG_LAYER,
    "dpo": MAP_LAYER,
    "kto": MAP_LAYER,
    "cpo": MAP_LAYER,
    "orpo": MAP_LAYER,
    "reward": MAP_LAYER,
    "prm": MAP_LAYER,
}
# A config records, under this attribute, whether its request was auto next to the value it resolved to.
INTENT_ATTRIBUTE = "unsloth_dataset_num_proc_intent"
# What a map site requests for "in-process" when the config's resolved value was an explicit serial.
IN_PROCESS_REQUEST = 1


def layer_of(family: str) -> str:
    """The encoding `family`'s config writes; an unknown family gets the map encoding (None = in-process)."""
    return DATASET_NUM_PROC_LAYER.get(family, MAP_LAYER)


def config_num_proc(request: Any, family: str) -> Optional[int]:
    """`request` as `family`'s trainer config stores it: the policy's answer in that family's encoding."""
    return get_dataset_num_proc(request, serial_as_none=layer_of(family) == MAP_LAYER)


def record_intent(config: Any, requested: Any) -> None:
    """Remember on `config` whether `requested` was auto, next to the value it resolved to."""
    try:
        setattr(config, INTENT_ATTRIBUTE, (is_auto_request(requested), getattr(config, "dataset_num_proc", None)))
    except Exception:  # a frozen or slotted config simply keeps its resolved value
        pass


def map_request(config: Any) -> Any:
    """What a map site asks for this config: None for auto, else the explicit count (1 = in-process).

    A value assigned after the config was built is read as a fresh request.
    """
    value = getattr(config, "dataset_num_proc", None)
    intent = getattr(config, INTENT_ATTRIBUTE, None)
    if not (isinstance(intent, tuple) and len(intent) == 2 and intent[1] == value):
        return value
    was_auto, resolved = intent
    if was_auto:
        return None
    return IN_PROCESS_REQUEST if resolved is None else resolved


def is_streaming(dataset: Any) -> bool:
    """Whether `dataset` is a `datasets.IterableDataset`, which maps lazily in its reader and takes no num_proc."""
    # Read from sys.modules: a dataset of that class exists only once `datasets` is imported.
    iterable = getattr(sys.modules.get("datasets"), "IterableDataset", None)
    return isinstance(iterable, type) and isinstance(dataset, iterable)


def sized_map(
    dataset: Any, function: Any, request: Any = None, *, sizer: Optional[Callable[..., Any]] = None, **map_kwargs: Any
) -> Any:
    """`dataset.map(function, **map_kwargs)` with `num_proc` sized for `request` (None = auto, 1 = in-process).

    The count knows the dataset's rows and weighs what each worker unpickles (the function and its `fn_kwargs`),
    and the map runs inside `map_failure_diagnostics`. A streamed dataset maps as it is read, without `num_proc`
    or `desc`. `sizer(request, rows=..., closure=..., batched=...)` stands in for `get_dataset_num_proc` where a
    caller adds rules of its own (Studio's).
    """
    if is_streaming(dataset):
        map_kwargs.pop("desc", None)
        return dataset.map(function, **map_kwargs)
    payload = (function, map_kwargs["fn_kwargs"]) if map_kwargs.get("fn_kwargs") else function
    batched = map_kwargs.get("batched", False)  # datasets maps one row a call unless told otherwise
    workers = (sizer or get_dataset_num_proc)(request, rows=len(dataset), closure=payload, batched=batched)
    with map_failure_diagnostics(workers):
        return dataset.map(function, num_proc=workers, **map_kwargs)


# --------------------------------------------------------------------------- command line


def _describe_installation() -> str:
    """Which distribution holds this module, its version, and the file this module was loaded from."""
    import importlib.metadata

    spec = globals().get("__spec__")
    source = os.path.realpath(__file__)
    # The top-level package names the distribution: unsloth_zoo for the canonical module, unsloth for its twin.
    package = (getattr(spec, "parent", None) or "").split(".")[0] or os.path.basename(os.path.dirname(source))
    try:
        names = importlib.metadata.packages_distributions().get(package) or [package]
        distribution = importlib.metadata.distribution(names[0])
        return f"{distribution.metadata['Name']} {distribution.version} from {source}"
    except Exception:
        return f"{package} (not installed as a distribution) from {source}"


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    """Print the decision for this host: `python -m unsloth_zoo.dataset_num_proc [--num-proc N] [--config-layer] [--json]`.

    Returns the exit status: 0, or 2 (after argparse's message) for a bad flag.
    """
    parser = argparse.ArgumentParser(
        prog="python -m unsloth_zoo.dataset_num_proc",
        description="Show how many dataset map() workers this host gets, and why.",
    )
    parser.add_argument("--num-proc", type=int, default=None, help="the count a caller would request (default: auto)")
    parser.add_argument("--rows", type=int, default=None, help="rows the map will process, when known")
    parser.add_argument(
        "--closure-bytes", type=int, default=None, help="pickled size of the mapped function, when known"
    )
    parser.add_argument(
        "--batched",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the map is batched (--no-batched: one row a call); unsaid, the per-row floor applies",
    )
    parser.add_argument(
        "--main-first",
        choices=(MAIN_FIRST_MAIN, MAIN_FIRST_REST),
        default=None,
        help="the map runs inside a main-first block, as the local main rank or as one of the rest",
    )
    parser.add_argument("--config-layer", action="store_true", help="encode in-process as a config does (1, not None)")
    parser.add_argument("--json", action="store_true", help="print the decision record as JSON")
    parser.add_argument(
        "--version", action="store_true", help="print the distribution's version and this module's path"
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:
        # argparse has already printed its message (or the help); main() reports the status instead of exiting.
        return exit_request.code if isinstance(exit_request.code, int) else 2
    out = stdout if stdout is not None else sys.stdout
    if args.version:
        out.write(_describe_installation() + "\n")
        return 0
    decision = explain_dataset_num_proc(
        args.num_proc,
        serial_as_none=not args.config_layer,
        rows=args.rows,
        closure_bytes=args.closure_bytes,
        main_first=args.main_first,
        batched=args.batched,
    )
    if args.json:
        out.write(json.dumps(decision.as_dict(), indent=2) + "\n")
    else:
        out.write(decision.format_table() + "\n")
    return 0


if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
