# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Data-parallel training across `mlx.launch` ranks: who this rank is, its share of a batch, and the collectives.

Every collective goes through `World.collective`, which turns the ring backend's lost connection into an error
naming the peer and, through a watchdog thread, ends a rank that waits longer than the timeout on a peer that
never comes. A failure inside a step travels to every rank in the step's status exchange, with its cause.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import socket
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ..dataset_num_proc import (
    MLX_HOSTFILE_ENV_VAR,
    MLX_RANK_ENV_VAR,
    mlx_ranks_on_this_host,
    parse_mlx_hostfile,
)

T = TypeVar("T")

TIMEOUT_ENV_VAR = "UNSLOTH_MLX_DISTRIBUTED_TIMEOUT"
# Hugging Face's `ddp_timeout` default: long enough for rank 0 to write a checkpoint while the others wait.
DEFAULT_TIMEOUT_S = 1800.0
# The watchdog's exit status when it ends a rank stuck in a collective.
WATCHDOG_EXIT_STATUS = 3
# Bytes of a failure's message that travel to the other ranks.
MESSAGE_BYTES = 240
FLAG_NAMES = ("should_training_stop", "should_epoch_stop", "should_save", "should_evaluate", "should_log")
# (local rank, local size) as MPI launchers export them: Open MPI's, then MPICH's and Intel MPI's.
MPI_PLACEMENT_ENV_VARS = (
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)
# Each rank's slots in a main-first exchange: its host, whether it is its host's main rank, a value it shares.
_HOST, _IS_MAIN, _SHARED = range(3)


# Written into each checkpoint, since a resume at another world size would walk different global batches.
WORLD_FILE = "mlx_world.json"


def world_file_text(size: int) -> str:
    return json.dumps({"world_size": size}) + "\n"


def check_world_size(checkpoint: Path, size: int) -> None:
    """Refuse a resume at another number of ranks than the checkpoint was saved with."""
    path = Path(checkpoint) / WORLD_FILE
    saved = json.loads(path.read_text(encoding="utf-8"))["world_size"] if path.is_file() else 1
    if saved != size:
        raise ValueError(
            f"resume_from_checkpoint={str(checkpoint)!r} was saved by {saved} rank(s) and this run has {size}: "
            f"resume with {saved} rank(s), since the global batch and the row order depend on the rank count"
        )


class RankFailure(RuntimeError):
    """Another rank failed, or could no longer be reached; the message names the rank and the cause."""


def read_timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV_VAR} must be a positive number of seconds, got {raw!r}")
    return value


def shard(indices: Sequence[int], rank: int, size: int) -> np.ndarray:
    """This rank's strided share of a global batch: rows rank, rank + size, ..."""
    return np.asarray(indices)[rank::size]


def _encode_message(text: str) -> np.ndarray:
    data = text.encode("utf-8", "replace")[:MESSAGE_BYTES]
    row = np.zeros(MESSAGE_BYTES, dtype=np.int32)
    row[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return row


def _decode_message(row: np.ndarray) -> str:
    data = bytes(int(value) for value in row if value)
    return data.decode("utf-8", "replace")


class _Watchdog:
    """Ends this process when one collective outlasts the timeout: a peer that never arrives must not hang us."""

    def __init__(self, rank: int, timeout: float) -> None:
        self.rank = rank
        self.timeout = timeout
        self._deadline: Optional[float] = None
        self._what = ""
        self._lock = threading.Lock()
        thread = threading.Thread(target=self._watch, name="mlx-distributed-watchdog", daemon=True)
        thread.start()

    def arm(self, what: str) -> None:
        with self._lock:
            self._deadline, self._what = time.monotonic() + self.timeout, what

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.5, self.timeout / 4))
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if expired:
                sys.stderr.write(
                    f"[unsloth mlx rank {self.rank}] no answer from the other ranks for {self.timeout:g} s during "
                    f"{what}: a rank stopped, hangs or never reached this collective ({TIMEOUT_ENV_VAR} sets the "
                    f"limit). Stopping rank {self.rank}.\n"
                )
                sys.stderr.flush()
                os._exit(WATCHDOG_EXIT_STATUS)


class World:
    """This process's place among the ranks; with one rank every collective is the identity."""

    def __init__(
        self,
        group: Any,
        local_rank: int = 0,
        local_size: int = 1,
        watchdog: Optional[_Watchdog] = None,
        local_main: Optional[int] = None,
    ):
        self.group = group
        self.rank = group.rank() if group is not None else 0
        self.size = group.size() if group is not None else 1
        self.local_rank = local_rank
        self.local_size = local_size
        # The global rank of this host's main rank, where the placement says it (a hostfile or a host exchange).
        self.local_main = local_main
        # Seconds spent in collectives by kind ("status", "gradients", "flags", ...), for the benchmark.
        self.seconds: Dict[str, float] = {}
        self._watchdog = watchdog if self.size > 1 else None
        # True while rank 0 writes on its own (checkpoints, final files): a save guarded for rank 0 then just runs.
        self.writing_alone = False

    @property
    def is_distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def peers(self) -> str:
        if self.size == 2:
            return f"rank {1 - self.rank}"
        left, right = (self.rank - 1) % self.size, (self.rank + 1) % self.size
        return f"rank {left} or rank {right} (its ring neighbours)"

    def collective(self, what: str, arrays: List[mx.array], kind: str = "other") -> List[np.ndarray]:
        """Sum each array over the ranks and return the sums as numpy; a lost peer raises `RankFailure`."""
        if not self.is_distributed:
            return [np.array(array) for array in arrays]
        # The inputs are computed first, so the clock below times only the exchange (and waiting for peers).
        mx.eval(arrays)
        summed = [mx.distributed.all_sum(array, group=self.group, stream=mx.cpu) for array in arrays]
        watchdog = self._watchdog
        if watchdog is not None:
            watchdog.arm(what)
        start = time.perf_counter()
        try:
            mx.eval(summed)
            # np.array may be where the wait happens when eval returned early, so it stays under the watchdog.
            return [np.array(array) for array in summed]
        except RuntimeError as error:
            raise RankFailure(
                f"rank {self.rank}: lost the connection to {self.peers()} during {what}; that rank exited or was "
                f"killed (see its own output). The backend said: {error}"
            ) from error
        finally:
            if watchdog is not None:
                watchdog.disarm()
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - start

    def exchange_status(self, what: str, failure: Optional[BaseException], counts: Sequence[int]) -> np.ndarray:
        """Every rank's failure (if any) and the sum of `counts`; raises naming the failed rank on the others."""
        if not self.is_distributed:
            return np.asarray(counts, dtype=np.int64)
        rows = np.zeros((self.size, 1 + MESSAGE_BYTES), dtype=np.int32)
        if failure is not None:
            rows[self.rank, 0] = 1
            rows[self.rank, 1:] = _encode_message(f"{type(failure).__name__}: {failure}")
        status, totals = self.collective(
            what, [mx.array(rows), mx.array(np.asarray(counts, dtype=np.int32).reshape(-1))], "status"
        )
        failed = [rank for rank in range(self.size) if status[rank, 0]]
        if failed and failure is None:
            causes = "; ".join(f"rank {rank} failed: {_decode_message(status[rank, 1:])}" for rank in failed)
            raise RankFailure(f"rank {self.rank} stops during {what} because {causes}")
        return totals.astype(np.int64)

    def sum_tree(self, what: str, tree: Any, extra: Sequence[mx.array] = ()) -> Any:
        """The tree's arrays (and `extra` scalars) summed over the ranks in one flat float32 collective."""
        if not self.is_distributed:
            return tree, list(extra)
        leaves = tree_flatten(tree)
        parts = [array.astype(mx.float32).reshape(-1) for _, array in leaves] + [
            mx.array(value).astype(mx.float32).reshape(-1) for value in extra
        ]
        (flat,) = self.collective(what, [mx.concatenate(parts)], "gradients")
        flat = mx.array(flat)
        out, offset = [], 0
        for key, array in leaves:
            out.append((key, flat[offset : offset + array.size].reshape(array.shape).astype(array.dtype)))
            offset += array.size
        sums = [flat[offset + position] for position in range(len(extra))]
        return tree_unflatten(out), sums

    def agree_flags(self, control: Any) -> None:
        """A control flag raised on any rank is raised on all, so every rank logs, evaluates, saves and stops together."""
        if not self.is_distributed:
            return
        values = np.array([int(bool(getattr(control, name))) for name in FLAG_NAMES], dtype=np.int32)
        (summed,) = self.collective("agreeing on the control flags", [mx.array(values)], "flags")
        for name, value in zip(FLAG_NAMES, summed):
            setattr(control, name, bool(value))

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Mark a write that rank 0 makes while the other ranks go on, so nothing inside waits for them."""
        self.writing_alone = True
        try:
            yield
        finally:
            self.writing_alone = False

    def barrier(self, what: str) -> None:
        self.collective(what, [mx.array(np.zeros(1, dtype=np.int32))])

    def _local_main_name(self) -> str:
        return "this host's main rank" + (
            f" (rank {self.local_main})" if self.local_main is not None else " (its local rank 0)"
        )

    def main_first(self, what: str, run_main: Callable[[], Tuple[T, int]], run_rest: Callable[[int], T]) -> T:
        """`run_main` on each host's main rank while that host's other ranks wait, then `run_rest` on those others.

        `run_main` returns its result and a non-negative number it shares with its host's other ranks (the
        worker count its map used, so they find its cache files); `run_rest` receives it, or -1 when unknown.
        Both waits are collectives, so they end at the timeout, naming the rank waited for, and a failure on
        any rank stops every rank with its cause.
        """
        if not self.is_distributed or self.local_size <= 1:
            return run_main()[0]
        is_main = self.local_rank == 0
        result: Any = None
        failure: Optional[BaseException] = None
        slots = np.zeros((self.size, 3), dtype=np.int64)
        if is_main:
            try:
                result, shared = run_main()
                slots[self.rank, _SHARED] = shared
            except Exception as error:  # raised below, once every rank has been told
                failure = error
        slots[self.rank, _HOST], slots[self.rank, _IS_MAIN] = host_id(), int(is_main)
        totals = self.exchange_status(
            f"{what}: waiting for {self._local_main_name()} to finish first", failure, slots.reshape(-1)
        )
        if failure is not None:
            raise failure
        main = local_main_of(totals.reshape(self.size, 3), self.rank)
        if not is_main:
            self.local_main = main if main is not None else self.local_main
            try:
                result = run_rest(-1 if main is None else int(totals.reshape(self.size, 3)[main, _SHARED]))
            except Exception as error:
                failure = error
        self.exchange_status(
            f"{what}: waiting for the other ranks on each host to finish after their main rank", failure, [0]
        )
        if failure is not None:
            raise failure
        return result


def host_id() -> int:
    """This host's name as a non-negative 31-bit number, which fits the int32 a collective sums."""
    return zlib.crc32(socket.gethostname().encode("utf-8", "replace")) & 0x7FFFFFFF


def local_main_of(slots: np.ndarray, rank: int) -> Optional[int]:
    """The global rank marked as main among the ranks sharing `rank`'s host in a main-first exchange."""
    mains = [
        other for other in range(len(slots)) if slots[other, _HOST] == slots[rank, _HOST] and slots[other, _IS_MAIN]
    ]
    return mains[0] if len(mains) == 1 else None


def mpi_placement(environ: Mapping[str, str]) -> Optional[Tuple[int, int]]:
    """(local rank, local size) from an MPI launcher's variables, or None when none sets both plausibly."""
    for rank_name, size_name in MPI_PLACEMENT_ENV_VARS:
        rank_text, size_text = environ.get(rank_name, "").strip(), environ.get(size_name, "").strip()
        if rank_text.isdigit() and size_text.isdigit() and int(rank_text) < int(size_text):
            return int(rank_text), int(size_text)
    return None


def hostfile_local_main(hostfile: Optional[str], rank_text: Optional[str]) -> Optional[int]:
    """The lowest global rank sharing this rank's addresses in the ring backend's hostfile: its host's main rank."""
    try:
        hosts = parse_mlx_hostfile(Path(hostfile).read_text(encoding="utf-8")) if hostfile else []
        rank = int(rank_text or "")
    except (OSError, ValueError):
        return None
    if not 0 <= rank < len(hosts):
        return None
    return min(other for other in range(len(hosts)) if hosts[other] & hosts[rank])


def _exchange_hosts(group: Any) -> Tuple[int, int, int]:
    """(local rank, local size, local main) from every rank's host name, for launchers that say nothing of it."""
    rows = np.zeros(group.size(), dtype=np.int32)
    rows[group.rank()] = host_id()
    summed = mx.distributed.all_sum(mx.array(rows), group=group, stream=mx.cpu)
    mx.eval(summed)
    hosts = np.array(summed)
    sharing = [other for other in range(group.size()) if hosts[other] == hosts[group.rank()]]
    return sharing.index(group.rank()), len(sharing), sharing[0]


def _exchange_local_main(group: Any, local_rank: int) -> Optional[int]:
    """The global rank that the launcher made this host's local rank 0, from every rank's host name and flag."""
    slots = np.zeros((group.size(), 3), dtype=np.int32)
    slots[group.rank(), _HOST], slots[group.rank(), _IS_MAIN] = host_id(), int(local_rank == 0)
    summed = mx.distributed.all_sum(mx.array(slots), group=group, stream=mx.cpu)
    mx.eval(summed)
    return local_main_of(np.array(summed), group.rank())


def _placement(group: Any, hostfile: Optional[str], rank_text: Optional[str]) -> Tuple[int, int, Optional[int]]:
    """(local rank, local size, local main): an MPI launcher's variables, else the hostfile, else a host exchange."""
    from_mpi = mpi_placement(os.environ)
    if from_mpi is not None:
        # Open MPI numbers a host's ranks in its mapping order, so its local rank 0 need not be the lowest rank.
        return from_mpi[0], from_mpi[1], _exchange_local_main(group, from_mpi[0])
    if hostfile:
        local_size, local_rank = mlx_ranks_on_this_host(hostfile, rank_text)
        return local_rank, local_size, hostfile_local_main(hostfile, rank_text)
    return _exchange_hosts(group)


_WORLD: Dict[str, World] = {}


@contextlib.contextmanager
def _time_limited(announcement: str) -> Iterator[None]:
    """Stop this process when the block outlasts the timeout: `mx.distributed.init` and its first collectives hold
    the GIL while they wait, so the limit is faulthandler's, which needs no Python."""
    timeout = read_timeout()
    limit = f"if they have not all joined within {timeout:g} s this rank stops ({TIMEOUT_ENV_VAR} sets the limit)"
    sys.stderr.write(f"{announcement}; {limit}\n")
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _join_ring(rank_text: str, hostfile: str) -> Any:
    """The ring group, joined under a time limit: a rank listening for a peer that never starts would wait forever."""
    rank = int(rank_text) if rank_text.strip().isdigit() else 0
    with _time_limited(f"[unsloth mlx rank {rank}] joining the ranks listed in {MLX_HOSTFILE_ENV_VAR}={hostfile}"):
        try:
            return mx.distributed.init()
        except RuntimeError as error:
            raise RankFailure(f"rank {rank} could not reach the other ranks listed in {hostfile}: {error}") from error


def _join_mpi(local_rank: int) -> Tuple[Any, Tuple[int, int, Optional[int]]]:
    """The group an MPI launcher started and this rank's placement in it, under a time limit: both wait on every
    rank."""
    with _time_limited(f"[unsloth mlx local rank {local_rank}] joining the ranks the MPI launcher started"):
        group = mx.distributed.init()
        return group, _placement(group, None, None) if group.size() > 1 else (0, 1, None)


def current_world() -> World:
    """The world of this process, set up once: the mlx group `mlx.launch` (or MLX_RANK / MLX_HOSTFILE) describes."""
    if "world" not in _WORLD:
        rank_text, hostfile = os.environ.get(MLX_RANK_ENV_VAR), os.environ.get(MLX_HOSTFILE_ENV_VAR)
        from_mpi, placed = mpi_placement(os.environ), None
        if not mx.distributed.is_available():
            group = None
        elif rank_text is not None and hostfile:
            group = _join_ring(rank_text, hostfile)
        elif from_mpi is not None:
            group, placed = _join_mpi(from_mpi[0])
        else:
            group = mx.distributed.init()
        if group is None or group.size() == 1:
            _WORLD["world"] = World(None)
        else:
            local_rank, local_size, local_main = placed or _placement(group, hostfile, rank_text)
            watchdog = _Watchdog(group.rank(), read_timeout())
            _WORLD["world"] = World(group, local_rank, local_size, watchdog, local_main)
    return _WORLD["world"]
