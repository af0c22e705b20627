"""The argument parser the command-line tools share: bad arguments raise, so each `main()` decides the exit."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad command-line arguments; `main()` prints the usage and returns 2."""


class Parser(argparse.ArgumentParser):
    # argparse would call sys.exit on bad arguments; raising keeps main() the only place that decides.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)
