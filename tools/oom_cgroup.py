"""A throw-away child memory cgroup with a hard limit, for running real out-of-memory experiments.

`memory_limited_cgroup(limit)` makes the child (cgroup v2 `memory.max` where this process's v2
cgroup already delegates the memory controller, else v1 `memory.limit_in_bytes` under this
process's own v1 memory cgroup), runs commands inside it, reads its `oom_kill` counter, and
removes it afterwards. The calling process never joins the child, so only the commands are limited.

`python -m tools.oom_cgroup check` says whether that works here and why not;
`python -m tools.oom_cgroup run --limit 512M -- CMD...` runs CMD limited and prints what happened.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")

# The shell wrapper exits with this when it cannot join the cgroup, so a command never runs unlimited by mistake.
JOIN_FAILED_EXIT = 125
_JOIN_AND_EXEC = f'echo $$ > "$0" || exit {JOIN_FAILED_EXIT}; exec "$@"'


@dataclass(frozen=True)
class Mount:
    """One cgroup filesystem mount: where it is, which cgroup path it shows as its top, and its super options."""

    point: Path
    root: str
    fstype: str
    options: frozenset[str]


@dataclass(frozen=True)
class Layout:
    """Where to make the child and which files to use, for one cgroup version."""

    version: int
    parent: Path

    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"

    @property
    def swap_file(self) -> str:
        # Capping swap makes the limit a real out-of-memory wall instead of a slow swap-out on hosts that have swap.
        return "memory.swap.max" if self.version == 2 else "memory.memsw.limit_in_bytes"

    @property
    def events_file(self) -> str:
        return "memory.events" if self.version == 2 else "memory.oom_control"

    @property
    def peak_file(self) -> str:
        return "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"


# ---- pure parsing -------------------------------------------------------------------------------


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts listed in a `/proc/<pid>/mountinfo` text."""
    mounts = []
    for line in text.splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3]), tail[0], frozenset(tail[2].split(","))))
    return mounts


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, plain)
    return field


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Map each controller name (and `""` for the v2 line) to this process's cgroup path, from `/proc/<pid>/cgroup`."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def cgroup_directory(mount: Mount, cgroup_path: str) -> Path | None:
    """The directory of `cgroup_path` under `mount`, or None when the mount does not show that path."""
    root = mount.root.rstrip("/")
    if root and cgroup_path != root and not cgroup_path.startswith(root + "/"):
        return None
    return mount.point / cgroup_path[len(root) :].lstrip("/")


def parse_flat_keyed(text: str) -> dict[str, int]:
    """`key value` lines (`memory.events`, `memory.oom_control`) as a dict of ints."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def parse_size(text: str) -> int:
    """`"512M"` -> 536870912; plain digits are bytes; K, M, G are powers of 1024."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def join_argv(procs_file: Path, argv: Sequence[str]) -> list[str]:
    """Wrap `argv` so the process writes its own pid into `procs_file` and then becomes `argv` (same pid)."""
    return ["/bin/sh", "-c", _JOIN_AND_EXEC, str(procs_file), *argv]


# ---- locating a usable parent -------------------------------------------------------------------


def find_layout() -> tuple[Layout | None, str]:
    """The place to make a limited child here, or None and the precise reason there is none."""
    try:
        mounts = parse_mountinfo(PROC_MOUNTINFO.read_text())
        own = parse_proc_cgroup(PROC_CGROUP.read_text())
    except OSError as error:
        return None, f"cannot read this process's cgroup membership: {error}"
    v2_layout, v2_reason = _v2_layout(mounts, own)
    if v2_layout is not None:
        return v2_layout, v2_reason
    v1_layout, v1_reason = _v1_layout(mounts, own)
    if v1_layout is not None:
        return v1_layout, f"{v1_reason} (cgroup v2 not used: {v2_reason})"
    return None, f"no usable memory cgroup: v2: {v2_reason}; v1: {v1_reason}"


def _v2_layout(mounts: list[Mount], own: dict[str, str]) -> tuple[Layout | None, str]:
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if mount is None or "" not in own:
        return None, "no cgroup2 mount or no v2 line in /proc/self/cgroup"
    directory = cgroup_directory(mount, own[""])
    if directory is None:
        return None, f"this process's v2 cgroup {own['']} is outside the mount at {mount.point}"
    subtree = directory / "cgroup.subtree_control"
    try:
        enabled = subtree.read_text().split()
    except OSError as error:
        return None, f"cannot read {subtree}: {error}"
    if "memory" not in enabled:
        return None, f"the memory controller is not enabled in {subtree} (enabled: {' '.join(enabled) or 'none'})"
    return Layout(2, directory), f"cgroup v2 child under {directory}"


def _v1_layout(mounts: list[Mount], own: dict[str, str]) -> tuple[Layout | None, str]:
    mount = next((m for m in mounts if m.fstype == "cgroup" and "memory" in m.options), None)
    if mount is None or "memory" not in own:
        return None, "no cgroup v1 memory mount or no memory line in /proc/self/cgroup"
    directory = cgroup_directory(mount, own["memory"])
    if directory is None or not (directory / "memory.limit_in_bytes").exists():
        return None, f"this process's v1 memory cgroup {own['memory']} is not visible under {mount.point}"
    return Layout(1, directory), f"cgroup v1 memory child under {directory}"


# ---- the handle ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupHandle:
    """A live child memory cgroup: its directory, its version, and ways to run in it and read it."""

    path: Path
    layout: Layout
    limit_bytes: int

    @property
    def version(self) -> int:
        return self.layout.version

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped so the started process joins this cgroup before it runs (exit 125 if joining fails)."""
        return join_argv(self.procs_file, argv)

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """`subprocess.run` of `argv` inside this cgroup; the returncode is the command's own (-9 when OOM-killed)."""
        return subprocess.run(self.wrap(argv), **kwargs)

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """`subprocess.Popen` of `argv` inside this cgroup, for callers that watch it while it runs."""
        return subprocess.Popen(self.wrap(argv), **kwargs)

    def pids(self) -> list[int]:
        return [int(line) for line in self.procs_file.read_text().split()]

    def oom_kills(self) -> int:
        """How many processes the kernel has OOM-killed in this cgroup so far."""
        return parse_flat_keyed((self.path / self.layout.events_file).read_text()).get("oom_kill", 0)

    def peak_bytes(self) -> int | None:
        """The most memory this cgroup has been charged, or None where the kernel does not report it."""
        try:
            return int((self.path / self.layout.peak_file).read_text())
        except (OSError, ValueError):
            return None


@contextlib.contextmanager
def memory_limited_cgroup(limit_bytes: int) -> Iterator[CgroupHandle]:
    """Make a child memory cgroup limited to `limit_bytes` (swap capped too), yield it, then remove it."""
    layout, reason = find_layout()
    if layout is None:
        raise OSError(errno.ENOTSUP, reason)
    path = layout.parent / f"oom-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        handle = CgroupHandle(path, layout, limit_bytes)
        _set_limit(handle)
        yield handle
    finally:
        _remove(path, layout.parent)


def _set_limit(handle: CgroupHandle) -> None:
    (handle.path / handle.layout.limit_file).write_text(str(handle.limit_bytes))
    swap = handle.path / handle.layout.swap_file
    if swap.exists():
        # v1 counts memory+swap here, so equal to the memory limit means no swap; v2 counts swap alone.
        swap.write_text("0" if handle.version == 2 else str(handle.limit_bytes))


def _remove(path: Path, parent: Path, attempts: int = 50) -> None:
    """Move anything still inside back to the parent, then rmdir; retried while exiting tasks drain."""
    for _ in range(attempts):
        if not _move_out(path, parent):
            # A v2 parent that delegates memory may hold no processes itself, so leftovers there are killed instead.
            with contextlib.suppress(OSError):
                (path / "cgroup.kill").write_text("1")
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
        time.sleep(0.05)
    path.rmdir()


def _move_out(path: Path, parent: Path) -> bool:
    """Write every pid left in `path` into `parent`; False if any of them could not be moved."""
    try:
        pids = (path / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return True
    moved = True
    for pid in pids:
        try:
            (parent / "cgroup.procs").write_text(pid)
        except ProcessLookupError:
            pass
        except OSError:
            moved = False
    return moved


def can_create_memory_cgroup() -> tuple[bool, str]:
    """Whether a limited child memory cgroup can really be made here (it tries one), and the precise reason if not."""
    if not sys.platform.startswith("linux"):
        return False, f"memory cgroups are Linux-only; this is {sys.platform}"
    try:
        # Only what the host may refuse is probed (make, limit, read, remove); whether the limit bites is for tests.
        with memory_limited_cgroup(64 << 20) as handle:
            handle.oom_kills()
    except OSError as error:
        return False, f"cannot make a limited memory cgroup: {error}"
    return True, find_layout()[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="say whether a limited child memory cgroup can be made here")
    run = sub.add_parser("run", help="run a command inside a fresh limited cgroup")
    run.add_argument("--limit", type=parse_size, required=True, help="e.g. 512M")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)

    if options.command == "check":
        ok, reason = can_create_memory_cgroup()
        print(("yes: " if ok else "no: ") + reason)
        return 0 if ok else 1
    cmd = options.cmd[1:] if options.cmd[:1] == ["--"] else options.cmd
    if not cmd:
        parser.error("run needs a command after --")
    with memory_limited_cgroup(options.limit) as handle:
        started = time.monotonic()
        completed = handle.run(cmd)
        report = {
            "cgroup": str(handle.path),
            "version": handle.version,
            "limit_bytes": handle.limit_bytes,
            "returncode": completed.returncode,
            "oom_kill": handle.oom_kills(),
            "peak_bytes": handle.peak_bytes(),
            "seconds": round(time.monotonic() - started, 3),
        }
    print(json.dumps(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
