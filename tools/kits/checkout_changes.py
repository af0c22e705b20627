"""What a test run added, removed or rewrote in the checkout, leaving out what the tools that run tests write there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Set, Tuple

# Written by Python, pytest, nox, dev.py and editable installs, not by tests; .git is git's.
TOOL_OWNED = frozenset({".git", ".nox", ".venv-nox", ".pytest_cache", "__pycache__"})
TOOL_OWNED_SUFFIXES = (".egg-info",)

Snapshot = Dict[str, Tuple[int, int]]  # relative path -> (mtime_ns, size); a folder's size is -1


def _tool_owned(name: str) -> bool:
    return name in TOOL_OWNED or name.endswith(TOOL_OWNED_SUFFIXES) or name.startswith((".nox-", ".venv"))


def top_level(root: Path) -> Set[str]:
    """The checkout root's own entries, less the tools' (cheap enough to compare around every test)."""
    return {name for name in os.listdir(root) if not _tool_owned(name)}


def snapshot(root: Path) -> Snapshot:
    """Every file and folder under `root`, less the tools', with what tells a rewrite apart."""
    found: Snapshot = {}
    pending = [Path(root)]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # removed while we looked
            continue
        for entry in entries:
            if _tool_owned(entry.name):
                continue
            relative = os.path.relpath(entry.path, root)
            try:
                if entry.is_dir(follow_symlinks=False):
                    found[relative] = (0, -1)
                    pending.append(Path(entry.path))
                else:
                    info = entry.stat(follow_symlinks=False)
                    found[relative] = (info.st_mtime_ns, info.st_size)
            except OSError:
                continue
    return found


def changes(before: Snapshot, after: Snapshot) -> List[str]:
    """'added X' / 'removed X' / 'rewrote X' lines, sorted; a new folder is named once, not each file in it."""
    added = sorted(set(after) - set(before))
    new_folders = [path for path in added if after[path][1] == -1]
    lines = [
        f"added {path}"
        for path in added
        if not any(path.startswith(folder + os.sep) for folder in new_folders if folder != path)
    ]
    removed = sorted(set(before) - set(after))
    gone_folders = [path for path in removed if before[path][1] == -1]
    lines += [
        f"removed {path}"
        for path in removed
        if not any(path.startswith(folder + os.sep) for folder in gone_folders if folder != path)
    ]
    lines += [f"rewrote {path}" for path in sorted(set(before) & set(after)) if before[path] != after[path]]
    return lines
