"""A fresh copy of the checkout as it is now: its tracked and unignored files, committed into a new git repository.

What a fresh clone would hold, plus the uncommitted edits, so a command run there sees neither build output nor a
venv nor anything another run left behind. Standard library only (`dev.py test` uses it with a bare python3).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def _git(*arguments: str, cwd: Path) -> str:
    return subprocess.run(["git", *arguments], cwd=cwd, check=True, capture_output=True, text=True).stdout


def checkout_files(root: Path) -> list[str]:
    """The checkout's tracked and unignored files, relative to `root`."""
    listing = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root)
    return [name for name in listing.split("\0") if name]


def copy_checkout(root: Path, target: Path) -> Path:
    """`target` made anew as a copy of `root`'s checkout, committed as one commit; returns `target`."""
    shutil.rmtree(target, ignore_errors=True)
    for name in checkout_files(root):
        source, copied = root / name, target / name
        copied.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), copied)  # shared/ cgroup trees link folders as the kernel does
        elif source.is_file():  # a tracked file deleted in the working tree is left out, as it would be committed
            shutil.copy2(source, copied)
    for command in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=copy", "-c", "user.email=copy@localhost", "commit", "-qm", "copy", "--no-verify"],
    ):
        _git(*command, cwd=target)
    return target
